"""Content-keyed caches that make a stateless server cheap: what costs compute is keyed by what
it was computed from, so any replica can use it and a restart loses nothing but warmth.

- `LRU`: a bounded in-memory map (least recently used out first).
- `LatentStore`: each text's compressor latents, keyed by (model id, adapter digest, text),
  in an LRU, optionally backed by a directory of safetensors files that several processes
  (replicas on one host, or a shared volume) read and write; writes are atomic (temp file +
  rename), so a reader never sees half a file.
- `CachedRecognizer`, `CachedEmbedder`: the instruction recognizer's verdicts and the dense
  embeddings, per text.
- `PrefixPool`: a few `PrefixKVCache`s (the instruction block's keys/values), one per block.

Every cached value is computed for one text on its own (a batch of one), so a hit returns
exactly what a miss would compute: replies do not change with the cache's state.

>>> lru = LRU(2); lru.put("a", 1); lru.put("b", 2); _ = lru.get("a"); lru.put("c", 3)
>>> sorted(lru.keys()), lru.evictions
(['a', 'c'], 1)
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch

from rhea.serve.errors import ServeConfigError
from rhea.memory.recognizer import recognize_at


def _nbytes(value) -> int:
    """Bytes of a cached tensor or array (0 for other values)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return int(getattr(value, "nbytes", 0) or 0)


class LRU:
    """A thread-safe map holding at most `max_entries` items (0: holds nothing) and, with `max_bytes`,
    at most that many bytes of values (tensors and arrays counted by their data; a value larger than
    the whole budget is not kept).

    >>> lru = LRU(10, max_bytes=64); lru.put("a", torch.zeros(8)); lru.put("b", torch.zeros(16))
    >>> lru.keys(), lru.bytes                      # 32 + 64 bytes do not fit in 64: "a" went first
    (['b'], 64)
    """

    def __init__(self, max_entries: int, *, max_bytes: int | None = None):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ServeConfigError(f"cache size {max_entries!r} must be an int >= 0")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
            raise ServeConfigError(f"cache bytes {max_bytes!r} must be an int >= 0 (or None: no byte bound)")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._data: OrderedDict = OrderedDict()
        self._sizes: dict = {}
        self.bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable, default=None):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return default

    def put(self, key: Hashable, value) -> None:
        size = _nbytes(value)
        with self._lock:
            if self.max_entries == 0 or (self.max_bytes is not None and size > self.max_bytes):
                return
            if key in self._data:
                self.bytes -= self._sizes[key]
            self._data[key], self._sizes[key] = value, size
            self.bytes += size
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries or (self.max_bytes is not None and self.bytes > self.max_bytes):
                old, _ = self._data.popitem(last=False)
                self.bytes -= self._sizes.pop(old)
                self.evictions += 1

    def keys(self) -> list:
        with self._lock:
            return list(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict:
        return {"entries": len(self._data), "max_entries": self.max_entries, "bytes": self.bytes,
                "max_bytes": self.max_bytes, "hits": self.hits, "misses": self.misses, "evictions": self.evictions}


def adapter_digest(model) -> str:
    """A short sha256 of the weights that shape the latents (LoRA adapters, `<mem>` rows, injector)
    and of the base model's name and the reply chunking (``compress_chunk_tokens``): latents cached under
    another digest are never reused."""
    h = hashlib.sha256(str(getattr(model.config, "base_model", "")).encode())
    chunking = getattr(model.config, "compress_chunk_tokens", None)
    if chunking is not None:  # (absent from the hash when None, so digests of unchunked models are unchanged)
        h.update(f"compress_chunk_tokens={chunking}".encode())
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "lora" in name or "mem" in name or "inject" in name or "projector" in name:
                h.update(name.encode())
                h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class LatentStore:
    """Latents per text: ``get(text)`` / ``put(text, tensor)``, in memory (LRU) and optionally
    in `directory` (safetensors, one file per key, shared between processes).

    >>> import tempfile, torch
    >>> d = tempfile.mkdtemp()
    >>> a, b = LatentStore("m", "x", 4, directory=d), LatentStore("m", "x", 4, directory=d)
    >>> a.put("reply", torch.ones(2, 3)); b.get("reply").shape, b.stats()["dir_hits"]
    (torch.Size([2, 3]), 1)

    `max_bytes` bounds the in-memory latents in bytes (one latent is `rhea.context.latent_bytes`:
    1.66 MB for SmolLM2-135M's `states` compressor), `dir_max_bytes` the directory: past it the files
    least recently used (by modification time, which a hit refreshes) are removed. Temporary files
    that a killed writer left (``*.tmp`` older than a minute) are removed when the store opens.
    """

    #: a temporary file older than this (seconds) belongs to a writer that died
    STALE_TMP_S = 60.0

    def __init__(self, model_id: str, digest: str, max_entries: int = 4096, *, directory: str | os.PathLike | None = None,
                 max_bytes: int | None = None, dir_max_bytes: int | None = None):
        self.model_id, self.digest = model_id, digest
        self.memory = LRU(max_entries, max_bytes=max_bytes)
        if dir_max_bytes is not None and (isinstance(dir_max_bytes, bool) or not isinstance(dir_max_bytes, int)
                                          or dir_max_bytes < 0):
            raise ServeConfigError(f"--cache-dir-bytes {dir_max_bytes!r} must be an int >= 0 (or unset: no bound)")
        self.dir_max_bytes = dir_max_bytes
        self.dir_bytes = 0
        self.dir_evictions = self.tmp_removed = 0
        self._dir_lock = threading.Lock()
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                probe = tempfile.NamedTemporaryFile(dir=self.directory, delete=True)
                probe.close()
            except OSError as e:
                raise ServeConfigError(f"--cache-dir {self.directory}: cannot write there ({e}); pass a writable "
                                       "directory (shared by the replicas)") from None
            self._scan_directory()
        self.dir_hits = self.dir_misses = self.dir_writes = 0

    def _files(self) -> list[tuple[float, int, Path]]:
        out = []
        for path in self.directory.glob("*/*.safetensors"):
            try:
                st = path.stat()
            except OSError:  # removed by another replica meanwhile
                continue
            out.append((st.st_mtime, st.st_size, path))
        return out

    def _scan_directory(self) -> None:
        """Remove the temporary files of dead writers; count (and bound) the bytes held."""
        import time

        now = time.time()
        for tmp in self.directory.glob("*/*.tmp"):
            try:
                if now - tmp.stat().st_mtime > self.STALE_TMP_S:
                    tmp.unlink()
                    self.tmp_removed += 1
            except OSError:
                pass
        self.dir_bytes = sum(size for _, size, _ in self._files())
        self._evict_files()

    def _evict_files(self) -> None:
        if self.dir_max_bytes is None or self.dir_bytes <= self.dir_max_bytes:
            return
        with self._dir_lock:
            files = sorted(self._files())  # oldest first; other replicas' files count too
            self.dir_bytes = sum(size for _, size, _ in files)
            for _, size, path in files:
                if self.dir_bytes <= self.dir_max_bytes:
                    break
                try:
                    path.unlink()
                    self.dir_evictions += 1
                except OSError:
                    pass
                self.dir_bytes -= size

    def key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model_id}\0{self.digest}\0{text}".encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.safetensors"

    def get(self, text: str, dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """The latents kept for `text`, or None. A file read from the directory is held in memory in
        `dtype` when given (another replica may have written it in another dtype), so the bytes the memory
        bound counts are those of the dtype in use."""
        key = self.key(text)
        hit = self.memory.get(key)
        if hit is not None or self.directory is None:
            return hit
        from safetensors.torch import load_file

        path = self._path(key)
        try:
            tensor = load_file(str(path))["latents"]
        except (FileNotFoundError, KeyError):
            self.dir_misses += 1
            return None
        except Exception:  # a corrupt file (another writer's crash): recompute and overwrite it
            self.dir_misses += 1
            return None
        self.dir_hits += 1
        try:
            os.utime(path)  # a hit makes the file recently used (eviction goes by modification time)
        except OSError:
            pass
        if dtype is not None and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        self.memory.put(key, tensor)
        return tensor

    def put(self, text: str, latents: torch.Tensor) -> None:
        key = self.key(text)
        latents = latents.detach().cpu().contiguous()
        self.memory.put(key, latents)
        if self.directory is None:
            return
        from safetensors.torch import save

        from rhea.storage import atomic_write_bytes

        # atomic (temp sibling, fsync, rename): readers see the old file or the whole new one
        data = save({"latents": latents}, metadata={"model": self.model_id, "digest": self.digest})
        if self.dir_max_bytes is not None and len(data) > self.dir_max_bytes:
            return  # larger than the whole directory budget: kept in memory only
        atomic_write_bytes(self._path(key), data)
        self.dir_writes += 1
        self.dir_bytes += len(data)
        self._evict_files()

    def stats(self) -> dict:
        out = self.memory.stats()
        if self.directory is not None:
            out.update(directory=str(self.directory), dir_hits=self.dir_hits, dir_misses=self.dir_misses,
                       dir_writes=self.dir_writes, dir_bytes=self.dir_bytes, dir_max_bytes=self.dir_max_bytes,
                       dir_evictions=self.dir_evictions, tmp_removed=self.tmp_removed)
        return out


class CachedCompress:
    """A `compress_fn` for `EpisodicMemory` that compresses each text alone and keeps the result."""

    def __init__(self, compress: Callable[[Sequence[str]], torch.Tensor], store: LatentStore,
                 device: torch.device | str = "cpu", dtype: torch.dtype | Callable[[], torch.dtype] = torch.float32):
        self.compress, self.store, self.device = compress, store, torch.device(device)
        self.dtype = dtype
        self.computed = 0

    def _dtype(self) -> torch.dtype:
        return self.dtype() if callable(self.dtype) else self.dtype

    def __call__(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """One ``[rows, width]`` latent per text on `device` (the model's), in `dtype` (the dtype the
        policy's memory stores: a bf16 model's latents are cached at half the bytes of fp32), hits and
        misses alike, so where and how the scores are computed never depends on the cache's state (a
        file another replica wrote in another dtype is cast)."""
        dtype, out = self._dtype(), []
        for text in texts:
            hit = self.store.get(text, dtype)
            if hit is None:
                hit = self.compress([text])[0].detach().to("cpu", dtype)
                self.store.put(text, hit)
                self.computed += 1
            out.append(hit)
        return [x.to(self.device, dtype) for x in out]


class CachedRecognizer:
    """The instruction recognizer with its verdicts kept per message text and whether it opens the
    conversation (the recognizer reads a first message differently); the rest delegates."""

    def __init__(self, recognizer, max_entries: int = 4096):
        self.inner = recognizer
        self.verdicts = LRU(max_entries)

    def __call__(self, text: str, turn: int | None = None):
        key = (turn == 0, text)
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = recognize_at(self.inner, text, turn)
            self.verdicts.put(key, verdict)
        return verdict

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CachedEmbedder:
    """An `Embedder` whose vectors are computed one text at a time and kept in an LRU."""

    def __init__(self, embedder, max_entries: int = 8192):
        self.inner = embedder
        self.vectors = LRU(max_entries)

    def _one(self, text: str) -> np.ndarray:
        model = getattr(self.inner, "model", None)
        if model is not None and hasattr(model, "encode"):  # a SentenceTransformer (MiniLMEmbedder.model)
            vec = model.encode([text], batch_size=1, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False)[0]
        else:
            vec = self.inner.encode([text])[0]
        return np.asarray(vec, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for text in texts:
            vec = self.vectors.get(text)
            if vec is None:
                vec = self._one(text)
                self.vectors.put(text, vec)
            out.append(vec)
        if not out:
            return self.inner.encode([])
        return np.stack(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class PrefixPool:
    """Up to `max_entries` `PrefixKVCache`s, one per instruction block (the plan's system text)."""

    def __init__(self, max_entries: int = 8):
        self.pool = LRU(max_entries)

    def for_block(self, system_text: str | None):
        from rhea.session.generation import PrefixKVCache

        if system_text is None or self.pool.max_entries == 0:
            return None
        cache = self.pool.get(system_text)
        if cache is None:
            cache = PrefixKVCache()
            self.pool.put(system_text, cache)
        return cache

    def stats(self) -> dict:
        with self.pool._lock:
            caches = list(self.pool._data.values())
        return {**self.pool.stats(), "kv_hits": sum(c.hits for c in caches if c),
                "kv_misses": sum(c.misses for c in caches if c)}


class HistoryPool:
    """Up to `max_entries` `HistoryKVCache`s: the keys/values of recent conversations, so a request
    that continues one (the client sends the whole conversation again, with the last reply and a
    new message) prefills only what is new.

    For each request's rendered prompt the entry sharing its longest token prefix is chosen. A
    request that continues that entry's whole prompt takes it over (its cache then holds this
    request's prompt and reply); one that only shares part of it (another conversation under the
    same system prompt, an edited or regenerated turn) gets a new entry forked from the shared part,
    so the conversation it branched from keeps its own. Least recently used entries go first.
    A fork shares the keys/values of the part in common until either side is replaced.
    """

    #: fewer shared tokens than this start a new, empty entry (a chat template's first tokens are
    #: shared by every conversation, and reusing them saves nothing worth an entry)
    MIN_SHARED = 16

    def __init__(self, max_entries: int = 8):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries={max_entries!r} must be an int >= 0")
        self.max_entries = max_entries
        self._entries: OrderedDict = OrderedDict()
        self._next = 0
        self.continued = self.forked = self.fresh = 0

    def for_prompts(self, prompts: Sequence[Sequence[int]]) -> list:
        """One `HistoryKVCache` (or None when the pool holds no entries) per prompt's token ids,
        each a different entry, so rows of one batch never write into the same one."""
        from rhea.session.history_cache import HistoryKVCache

        if self.max_entries == 0:
            return [None] * len(prompts)
        taken: set[int] = set()
        out = []
        for ids in prompts:
            best, shared = None, 0
            for key, cache in self._entries.items():
                if key not in taken:
                    n = cache.common_prefix(ids)
                    if n > shared:
                        best, shared = key, n
            if best is not None and shared >= max(self._entries[best].prompt_tokens, 1):
                key = best  # the same conversation, one turn on
                self.continued += 1
            else:
                cache = self._entries[best].fork(shared) if best is not None and shared >= self.MIN_SHARED \
                    else HistoryKVCache()
                if len(cache):
                    self.forked += 1
                else:
                    self.fresh += 1
                while len(self._entries) >= self.max_entries:
                    victim = next((k for k in self._entries if k not in taken), None)
                    if victim is None:  # every entry serves a row of this batch: no room for this one
                        break
                    del self._entries[victim]
                if len(self._entries) >= self.max_entries:
                    out.append(None)
                    continue
                key, self._next = self._next, self._next + 1
                self._entries[key] = cache
            self._entries.move_to_end(key)
            taken.add(key)
            out.append(self._entries[key])
        return out

    def stats(self) -> dict:
        caches = list(self._entries.values())
        return {"entries": len(caches), "max_entries": self.max_entries, "continued": self.continued,
                "forked": self.forked, "fresh": self.fresh, "kv_hits": sum(c.hits for c in caches),
                "reused_tokens": sum(c.reused_tokens for c in caches),
                "stored_tokens": sum(len(c) for c in caches)}


__all__ = ["LRU", "CachedCompress", "CachedEmbedder", "CachedRecognizer", "HistoryPool", "LatentStore",
           "PrefixPool", "adapter_digest"]
