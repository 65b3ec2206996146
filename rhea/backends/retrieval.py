"""Lexical retrieval over past turns: a thin, deterministic wrapper around `bm25s`.

>>> r = BM25Retriever(["cats purr and sleep", "dogs bark at night", "sorting lists in python"])
>>> r.search("why do cats sleep so much", k=1)[0][0]
0
"""
from __future__ import annotations

import re
from typing import Sequence

from rhea.errors import RheaConfigError, require_text



def _import_bm25s():
    """Import bm25s without letting it start JAX.

    bm25s imports ``jax.lax`` when JAX is installed and runs a top-k on it at import, which
    initialises JAX's GPU backend: on a GPU machine JAX then preallocates 75% of the GPU's
    memory (and fails in every other process that does the same), although rhea scores on
    sparse NumPy arrays. Unless the program has already imported JAX itself, bm25s is imported
    with ``jax`` hidden, so it takes its NumPy top-k; ``import jax`` works as before afterwards.
    """
    import sys

    hide = "jax" not in sys.modules
    if hide:
        sys.modules["jax"] = None  # makes `import jax.lax` raise ImportError
    try:
        import bm25s
        from bm25s.stopwords import STOPWORDS_EN
    finally:
        if hide and sys.modules.get("jax", 0) is None:
            del sys.modules["jax"]
    return bm25s, STOPWORDS_EN


try:  # bm25s is an optional dependency of the BM25 policy only.
    bm25s, STOPWORDS_EN = _import_bm25s()
except ImportError:  # pragma: no cover - exercised only without bm25s installed
    bm25s = None
    STOPWORDS_EN = ()

_WORD = re.compile(r"(?u)\b\w\w+\b")
_STOP = frozenset(STOPWORDS_EN)


def _stem(word: str) -> str:
    # A light suffix strip so "cats"/"cat" and "sleeping"/"sleep" meet; a full stemmer
    # would need another dependency for little gain on conversational text.
    for suffix in ("ing", "ies", "es", "s", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased, stop-word-free, lightly stemmed words.

    >>> bm25_tokens("The cats and the sleeping dog")
    ['cat', 'sleep', 'dog']
    """
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


class BM25Retriever:
    """Rank texts against a query with BM25 (Lucene variant, k1=1.5, b=0.75).

    `search` returns `(index, score)` pairs, best first; ties go to the earlier text so
    results are deterministic. Texts that share no word with the query are not returned.
    """

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75):
        if bm25s is None:
            raise ImportError("BM25Retriever needs the bm25s package: pip install bm25s")
        if isinstance(texts, str):
            raise RheaConfigError("texts must be a list of strings, got a single str; wrap it in a list")
        if k1 <= 0 or not 0.0 <= b <= 1.0:
            raise RheaConfigError(f"k1={k1} must be > 0 and b={b} in [0, 1]")
        self.texts = list(texts)
        for i, t in enumerate(self.texts):
            if not isinstance(t, str):
                raise RheaConfigError(f"texts[{i}] must be a str, got {type(t).__name__}")
        self._index = None
        if self.texts:
            self._index = bm25s.BM25(k1=k1, b=b)
            self._index.index([bm25_tokens(t) for t in self.texts], show_progress=False)

    def __len__(self) -> int:
        return len(self.texts)

    def scores(self, query: str) -> list[float]:
        """The BM25 score of every text for `query`, in text order (0.0 = no shared word)."""
        require_text(query, "query")
        tokens = bm25_tokens(query)
        if self._index is None or not tokens:
            return [0.0] * len(self.texts)
        return [float(s) for s in self._index.get_scores(tokens)]

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Up to `k` `(index, score)` pairs with score > 0, best first."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise RheaConfigError(f"k={k!r} must be an int >= 1")
        scores = self.scores(query)
        ranked = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        return [(i, float(scores[i])) for i in ranked[:k] if scores[i] > 0]
