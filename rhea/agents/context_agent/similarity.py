"""Embedding lookups for Context-Agent: a per-text cache around any `Embedder`, and top-k over nodes."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from rhea.agents.context_agent.forest import Node
from rhea.backends.embedding import Embedder
from rhea.errors import RheaConfigError


class EmbeddingCache:
    """Encodes each distinct text once (queries are looked up again when their turn is stored).

    >>> from rhea.backends.embedding import HashingEmbedder
    >>> cache = EmbeddingCache(HashingEmbedder(32))
    >>> _ = cache.encode("hi"); _ = cache.encode("hi")
    >>> cache.hits, cache.misses
    (1, 1)
    """

    def __init__(self, embedder: Embedder, max_entries: int = 4096):
        if not isinstance(embedder, Embedder):
            raise RheaConfigError(f"embedder={embedder!r} must implement Embedder.encode(texts) -> np.ndarray [n, d]")
        self.embedder = embedder
        self.max_entries = max_entries
        self._vectors: dict[str, np.ndarray] = {}
        self.hits = self.misses = 0

    def encode(self, text: str) -> np.ndarray:
        if text in self._vectors:
            self.hits += 1
            return self._vectors[text]
        self.misses += 1
        vector = np.asarray(self.embedder.encode([text]), dtype=np.float32).reshape(-1)
        if len(self._vectors) >= self.max_entries:
            self._vectors.pop(next(iter(self._vectors)))  # oldest first: queries rarely come back after long
        self._vectors[text] = vector
        return vector


def top_k_nodes(query: np.ndarray, nodes: Sequence[Node], k: int) -> list[tuple[Node, float]]:
    """The k nodes most similar (cosine of L2-normalised vectors) to `query`, best first.

    >>> from rhea.agents.context_agent.forest import Node
    >>> a = Node("n1", "t1", "b1", None, 0, "a", "", [1.0, 0.0]); b = Node("n2", "t1", "b1", "n1", 1, "b", "", [0.0, 1.0])
    >>> [(n.id, round(s, 2)) for n, s in top_k_nodes(np.array([0.6, 0.8]), [a, b], 1)]
    [('n2', 0.8)]
    """
    if not nodes:
        return []
    matrix = np.asarray([n.embedding for n in nodes], dtype=np.float32)
    if matrix.shape[1] != query.shape[0]:
        raise RheaConfigError(f"query embedding has dim {query.shape[0]} but nodes have {matrix.shape[1]}; "
                         "use the same embedder for the whole conversation (or reset())")
    scores = matrix @ query.astype(np.float32)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(nodes[i], float(scores[i])) for i in order]
