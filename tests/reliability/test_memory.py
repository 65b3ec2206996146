"""Honest memory: latents counted in bytes, caches bounded in bytes, bytes held per conversation."""
from __future__ import annotations

import os
import time

import pytest
import torch

from rhea.context import latent_bytes, model_latent_bytes
from rhea.serve.cache import LRU, LatentStore


def test_one_latent_of_each_injection():
    assert latent_bytes(24, 576, layers=30, injection="states") == 24 * 30 * 576 * 4 == 1_658_880
    assert latent_bytes(8, 576, layers=30, injection="raw") == 8 * 576 * 4
    assert latent_bytes(16, 1536, layers=28, injection="states", chunks=3) == 3 * 16 * 28 * 1536 * 4


def test_the_formula_is_what_a_model_compresses():
    from rhea.testing import tiny_rhea

    for injection in ("raw", "states"):
        model = tiny_rhea(latent_injection=injection)
        lat = model.compress_replies(["the cat sat on the mat"])[0].float()
        assert lat.numel() * lat.element_size() == model_latent_bytes(model)
        layers = model.latent_width // model.hidden_size
        assert model_latent_bytes(model) == latent_bytes(model.n_mem, model.hidden_size, layers=layers,
                                                         injection=injection)


def test_the_memory_cache_is_bounded_in_bytes():
    one = torch.zeros(24, 30 * 8)  # 23,040 bytes
    lru = LRU(4096, max_bytes=3 * one.numel() * 4)
    for i in range(10):
        lru.put(i, one.clone())
    assert lru.keys() == [7, 8, 9] and lru.bytes == 3 * one.numel() * 4 and lru.evictions == 7
    lru.put("huge", torch.zeros(100_000))  # over the whole budget: not kept, nothing evicted for it
    assert "huge" not in lru.keys() and len(lru) == 3


def test_the_cache_folder_is_bounded_and_loses_stale_temp_files(tmp_path):
    store = LatentStore("m", "d", 100, directory=tmp_path, dir_max_bytes=None)
    store.put("probe", torch.zeros(4, 8))
    one = store.stats()["dir_bytes"]
    stale = tmp_path / "ab" / ".x.safetensors.123.tmp"
    stale.parent.mkdir(exist_ok=True)
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fresh = tmp_path / "ab" / ".y.safetensors.456.tmp"  # a live writer's: kept
    fresh.write_bytes(b"half")
    store = LatentStore("m", "d", 100, directory=tmp_path, dir_max_bytes=3 * one)
    assert not stale.exists() and fresh.exists() and store.tmp_removed == 1
    for i in range(6):
        store.put(f"text {i}", torch.full((4, 8), float(i)))
        time.sleep(0.01)
    files = list(tmp_path.glob("*/*.safetensors"))
    assert len(files) == 3 and store.stats()["dir_bytes"] <= 3 * one and store.dir_evictions == 4
    other = LatentStore("m", "d", 100, directory=tmp_path)
    assert other.get("text 5") is not None and other.get("text 0") is None


def test_a_session_reports_the_bytes_it_holds():
    from rhea.session import ChatSession
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=2)
    chat.send("the cat sat")
    chat.send("the dog ran")
    held = chat.bytes_held()
    assert held["latents"] == 2 * model_latent_bytes(model, dtype_bytes=torch.finfo(model.dtype).bits // 8) or \
        held["latents"] == 2 * model_latent_bytes(model)
    assert held["kv_cache"] > 0 and chat.records[-1].bytes_held == sum(held.values())
    plain = ChatSession(model, policy="vanilla", max_new_tokens=2, reuse_prefix_cache=False)
    plain.send("hi")
    assert plain.bytes_held() == {"kv_cache": 0, "latents": 0, "instructions": 0} and plain.records[-1].bytes_held == 0


def test_the_instruction_block_is_in_the_bytes_a_session_holds():
    from rhea.session import ChatSession
    from rhea.testing import tiny_rhea

    chat = ChatSession(tiny_rhea(), policy="rhea", max_new_tokens=2)
    chat.send("From now on, always answer in French.")
    block = chat.policy.im.render()
    assert block and chat.bytes_held()["instructions"] == len(block.encode("utf-8"))
    assert chat.records[-1].bytes_held == sum(chat.bytes_held().values())
