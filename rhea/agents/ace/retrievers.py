"""Passage retrievers behind one interface: `search(query, k, exclude) -> [(index, score)]`.

`exclude` holds the indices already in the working memory, so RETRIEVE always brings new
evidence (de-duplication happens in the ranking, not after it, so k new passages come back
when the corpus has them).

>>> r = BM25Passages(["Mary got the milk.", "John went home.", "Mary went to the garden."])
>>> r.search("where is Mary", k=1, exclude={0})
[(2, ...)]
>>> from rhea.backends.embedding import HashingEmbedder
>>> DensePassages(["the cat sat", "dogs bark"], HashingEmbedder(64)).search("a cat sat", k=1)[0][0]
0
"""
from __future__ import annotations

from typing import Collection, Protocol, Sequence, runtime_checkable

import numpy as np

from rhea.agents.ace.errors import CorpusError
from rhea.backends.embedding import Embedder
from rhea.backends.retrieval import BM25Retriever, bm25_tokens
from rhea.errors import require_text
from rhea.policies.validation import positive_int


@runtime_checkable
class PassageRetriever(Protocol):
    texts: list[str]

    def search(self, query: str, k: int, exclude: Collection[int] = ()) -> list[tuple[int, float]]:
        """Up to `k` `(index, score)` pairs not in `exclude`, best first."""
        ...


def check_corpus(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise CorpusError(f"passages must be a list of str, got {type(texts).__name__}; wrap a single text in a list")
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise CorpusError(f"passages[{i}]={t!r} must be a non-blank str; drop empty passages before indexing")
    return list(texts)


def _rank(scores: Sequence[float], k: int, exclude: Collection[int], keep) -> list[tuple[int, float]]:
    positive_int(k, "k")
    excluded = set(exclude)
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))  # ties: earlier passage first
    return [(i, float(scores[i])) for i in order if i not in excluded and keep(scores[i])][:k]


class BM25Passages:
    """Lexical retrieval (`rhea.backends.retrieval.BM25Retriever`); passages sharing no word are never returned."""

    kind = "bm25"

    def __init__(self, texts: Sequence[str]):
        self.texts = check_corpus(texts)
        # bm25s cannot index a corpus without a single indexable word ("a b c"): nothing can match it anyway
        indexable = any(bm25_tokens(t) for t in self.texts)
        self._bm25 = BM25Retriever(self.texts) if indexable else None

    def search(self, query: str, k: int, exclude: Collection[int] = ()) -> list[tuple[int, float]]:
        require_text(query, "query")
        scores = self._bm25.scores(query) if self._bm25 is not None else [0.0] * len(self.texts)
        return _rank(scores, k, exclude, keep=lambda s: s > 0)


class DensePassages:
    """Cosine similarity of `Embedder` vectors (e.g. `MiniLMEmbedder`); the corpus is encoded once."""

    kind = "dense"

    def __init__(self, texts: Sequence[str], embedder: Embedder):
        if not isinstance(embedder, Embedder):
            raise CorpusError(f"embedder={embedder!r} must implement encode(texts) -> np.ndarray (see rhea.backends.embedding)")
        self.texts = check_corpus(texts)
        self.embedder = embedder
        self._vectors = embedder.encode(self.texts) if self.texts else np.zeros((0, 1), dtype=np.float32)

    def search(self, query: str, k: int, exclude: Collection[int] = ()) -> list[tuple[int, float]]:
        require_text(query, "query")
        if not self.texts:
            return _rank([], k, exclude, keep=lambda s: True)
        scores = self._vectors @ self.embedder.encode([query])[0]
        return _rank(scores.tolist(), k, exclude, keep=lambda s: True)


def make_retriever(kind: str | Embedder, texts: Sequence[str]) -> PassageRetriever:
    """`"bm25"` for BM25, `"dense"` for MiniLM, or any `Embedder` for dense retrieval with it.

    >>> make_retriever("bm25", ["cats purr"]).kind
    'bm25'
    """
    if isinstance(kind, str):
        if kind == "bm25":
            return BM25Passages(texts)
        if kind == "dense":
            from rhea.backends.embedding import MiniLMEmbedder

            return DensePassages(texts, MiniLMEmbedder())
        raise CorpusError(f"retriever={kind!r} must be 'bm25', 'dense' or an Embedder instance")
    return DensePassages(texts, kind)
