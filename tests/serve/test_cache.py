"""The content-keyed caches of `rhea serve`: LRU bound, the shared safetensors directory, and
that a cache's state never changes a reply (latent tier forced on, so latents are computed)."""
from __future__ import annotations

import json

import pytest
import torch

from rhea.serve.cache import LRU, CachedRecognizer, LatentStore, adapter_digest
from rhea.serve.errors import ServeConfigError
from rhea.testing import tiny_rhea

LATENT_ON = {"scorer": "latent", "latent_tier": "on", "tier_mode": "budget", "max_raw": 1, "max_latent": 4,
             "recognizer": None, "recent_raw": 0}


def test_lru_keeps_the_most_recently_used_within_its_bound():
    lru = LRU(3)
    for k in "abcd":
        lru.put(k, k.upper())
    assert lru.keys() == ["b", "c", "d"] and lru.evictions == 1 and lru.get("a") is None
    assert lru.get("b") == "B"  # b is now the most recent
    lru.put("e", "E")
    assert lru.keys() == ["d", "b", "e"] and len(lru) == 3
    assert lru.stats() == {"entries": 3, "max_entries": 3, "bytes": 0, "max_bytes": None, "hits": 1, "misses": 1,
                           "evictions": 2}
    off = LRU(0)
    off.put("a", 1)
    assert off.get("a") is None and len(off) == 0
    with pytest.raises(ServeConfigError):
        LRU(-1)


def test_latent_store_is_shared_through_a_directory(tmp_path):
    a = LatentStore("m", "digest1", 2, directory=tmp_path)
    b = LatentStore("m", "digest1", 2, directory=tmp_path)
    x = torch.randn(4, 8)
    a.put("a reply", x)
    assert torch.equal(b.get("a reply"), x) and b.stats()["dir_hits"] == 1
    assert torch.equal(b.get("a reply"), x) and b.stats()["dir_hits"] == 1  # now from b's memory
    assert b.get("another reply") is None and b.stats()["dir_misses"] == 1
    assert LatentStore("m", "digest2", 2, directory=tmp_path).get("a reply") is None  # other adapters: no reuse
    assert LatentStore("other", "digest1", 2, directory=tmp_path).get("a reply") is None  # other model: no reuse
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert files == [f"{a.key('a reply')}.safetensors"]  # atomic write: no temp file left behind
    # a corrupt file (e.g. a writer killed mid-way on a filesystem without atomic rename) is a miss, then rewritten
    path = next(tmp_path.rglob("*.safetensors"))
    path.write_bytes(b"garbage")
    c = LatentStore("m", "digest1", 2, directory=tmp_path)
    assert c.get("a reply") is None
    c.put("a reply", x)
    assert torch.equal(LatentStore("m", "digest1", 2, directory=tmp_path).get("a reply"), x)


def test_latent_store_memory_is_bounded():
    store = LatentStore("m", "d", 2)
    for i in range(5):
        store.put(f"reply {i}", torch.full((2, 2), float(i)))
    assert len(store.memory) == 2 and store.get("reply 0") is None and store.get("reply 4")[0, 0] == 4


def test_cache_dir_must_be_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ServeConfigError, match="cannot write"):
        LatentStore("m", "d", 2, directory=blocker / "sub")


def test_adapter_digest_changes_with_the_adapter_weights():
    model = tiny_rhea()
    before = adapter_digest(model)
    assert before == adapter_digest(tiny_rhea())  # same weights, same digest
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n).add_(1.0)
    assert adapter_digest(model) != before


def test_recognizer_verdicts_are_cached_per_text():
    calls = []

    def recognizer(text):
        calls.append(text)
        return len(text)

    cached = CachedRecognizer(recognizer, 8)
    assert [cached("ab"), cached("abc"), cached("ab")] == [2, 3, 2] and calls == ["ab", "abc"]


def _request(messages):
    from rhea.serve.protocol import parse_request

    return parse_request(json.dumps({"model": "tiny", "messages": messages, "rhea": True}).encode(), "tiny")


MESSAGES = [{"role": "user", "content": "the cat is blue"}, {"role": "assistant", "content": "yes the cat is blue"},
            {"role": "user", "content": "the dog is red"}, {"role": "assistant", "content": "a red dog"},
            {"role": "user", "content": "paris is the capital of france"}, {"role": "assistant", "content": "yes paris"},
            {"role": "user", "content": "what color is the dog ?"}]


def test_latents_are_computed_once_and_shared_between_replicas(tmp_path):
    """Latent tier forced on: every past reply is compressed once, a second request reuses it, a
    second engine (a replica) on the same directory computes none of them, and no cache state
    changes the plan or the greedy reply."""
    from rhea.serve.engine import Engine, rhea_usage

    model = tiny_rhea()
    first = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=LATENT_ON, max_tokens=3, cache_dir=tmp_path)
    replica = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=LATENT_ON, max_tokens=3, cache_dir=tmp_path)
    uncached = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=LATENT_ON, max_tokens=3, cache_entries=0)
    try:
        a = first.submit(_request(MESSAGES)).result(timeout=120)
        tiers = [d.tier for d in a.plan.decisions.turns]
        assert "latent" in tiers and tiers.count("raw") <= 1, tiers
        assert a.plan.ledger.latent_slots > 0
        assert first.compress.computed == 4  # 3 replies + the query, each once
        again = first.submit(_request(MESSAGES)).result(timeout=120)
        assert first.compress.computed == 4 and first.latents.memory.hits >= 4
        b = replica.submit(_request(MESSAGES)).result(timeout=120)
        assert replica.compress.computed == 0 and replica.latents.dir_hits == 4
        c = uncached.submit(_request(MESSAGES)).result(timeout=120)
        uncached.submit(_request(MESSAGES)).result(timeout=120)
        assert uncached.compress.computed == 8  # no cache: everything again
        objs = [rhea_usage(x, "rhea") for x in (a, again, b, c)]
        assert all(o == objs[0] for o in objs)
        assert {x.text for x in (a, again, b, c)} == {a.text}
        stats = first.cache_stats()
        assert stats["latents"]["dir_writes"] == 4 and stats["recognizer"]["hits"] >= 3
    finally:
        for e in (first, replica, uncached):
            e.close()


def test_cached_latents_are_kept_in_the_memory_dtype_hits_and_misses_alike(tmp_path):
    """A bf16 memory's latents are cached at half the bytes of fp32; a hit returns what a miss does, and a
    file another replica wrote in fp32 is read back in this one's dtype."""
    from rhea.serve.cache import CachedCompress

    calls = []

    def compress(texts):
        calls.append(list(texts))
        return [torch.full((2, 3), 1.5) for _ in texts]  # fp32, as a compressor returns

    fp32 = CachedCompress(compress, LatentStore("m", "d", 8, directory=tmp_path))
    assert fp32(["reply"])[0].dtype == torch.float32
    store = LatentStore("m", "d", 8, directory=tmp_path)
    half = CachedCompress(compress, store, dtype=lambda: torch.bfloat16)
    read = half(["reply"])[0]  # the fp32 file: a directory hit, cast
    assert read.dtype == torch.bfloat16 and len(calls) == 1 and store.dir_hits == 1
    assert store.stats()["bytes"] == 2 * 3 * 2  # held in memory in bf16 too, not in the file's fp32
    in_memory = LatentStore("m", "d", 8)
    half = CachedCompress(compress, in_memory, dtype=torch.bfloat16)
    miss, hit = half(["other reply"])[0], half(["other reply"])[0]
    assert miss.dtype == hit.dtype == torch.bfloat16 and torch.equal(miss, hit) and len(calls) == 2
    assert in_memory.stats()["bytes"] == 2 * 3 * 2  # one bf16 latent of 6 values (fp32: 24 bytes)


def test_another_process_reads_what_this_one_wrote(tmp_path):
    """Two processes (replicas) share latents through the directory: a child writes, we read."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys, torch; from rhea.serve.cache import LatentStore; "
            "LatentStore('m', 'd', 4, directory=sys.argv[1]).put('shared reply', torch.arange(6.).reshape(2, 3))")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, timeout=120)
    got = LatentStore("m", "d", 4, directory=tmp_path).get("shared reply")
    assert torch.equal(got, torch.arange(6.).reshape(2, 3))


def test_instruction_block_kv_is_reused_across_requests_without_changing_replies():
    from rhea.serve.engine import Engine

    model = tiny_rhea()
    msgs = [{"role": "system", "content": "always answer in french ."}, {"role": "user", "content": "the cat is blue"},
            {"role": "assistant", "content": "yes"}, {"role": "user", "content": "what color is the cat ?"}]
    kw = {"scorer": "bm25", "recognizer": None}
    pooled = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=kw, max_tokens=3, history_entries=0)
    plain = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=kw, max_tokens=3, prefix_blocks=0,
                   history_entries=0)
    try:
        a = pooled.submit(_request(msgs)).result(timeout=60)
        b = pooled.submit(_request(msgs[:1] + [{"role": "user", "content": "the dog ?"}])).result(timeout=60)
        stats = pooled.cache_stats()["prefix_kv"]
        assert stats["kv_misses"] == 1 and stats["kv_hits"] == 1  # same block: the second prefill skips it
        assert b.timings["prefix_reused_tokens"] > 0
        assert plain.submit(_request(msgs)).result(timeout=60).text == a.text
        assert plain.cache_stats()["prefix_kv"]["kv_misses"] == 0
    finally:
        pooled.close()
        plain.close()


def test_conversation_kv_is_reused_when_a_request_continues_one_and_forked_when_it_branches():
    from rhea.serve.engine import Engine

    model = tiny_rhea()
    system = {"role": "system", "content": "always answer in french . keep every answer short and polite ."}
    turns = [system, {"role": "user", "content": "the cat is blue and the dog is red"}]
    pooled = Engine(model, model_id="tiny", policy="vanilla", max_tokens=4, history_entries=2, start=False)
    plain = Engine(model, model_id="tiny", policy="vanilla", max_tokens=4, history_entries=0, prefix_blocks=0,
                   start=False)
    pooled.start()
    plain.start()
    try:
        reused = []
        for question in ("what color is the cat ?", "and the dog ?", "and the bird ?"):
            a = pooled.submit(_request(turns)).result(timeout=60)
            assert a.text == plain.submit(_request(turns)).result(timeout=60).text
            reused.append(a.timings["prefix_reused_tokens"])
            turns = turns + [{"role": "assistant", "content": a.text}, {"role": "user", "content": question}]
        assert reused[0] == 0 and 0 < reused[1] < reused[2], reused  # each request continues the last
        stats = pooled.cache_stats()["history_kv"]
        assert (stats["fresh"], stats["continued"], stats["entries"]) == (1, 2, 1)
        # another conversation under the same system prompt forks the shared part; the first keeps its entry
        other = [system, {"role": "user", "content": "tell me about the moon"}]
        b = pooled.submit(_request(other)).result(timeout=60)
        assert b.text == plain.submit(_request(other)).result(timeout=60).text
        assert b.timings["prefix_reused_tokens"] > 0
        stats = pooled.cache_stats()["history_kv"]
        assert stats["forked"] == 1 and stats["entries"] == 2
        c = pooled.submit(_request(turns)).result(timeout=60)  # the first conversation goes on from its own entry
        assert c.timings["prefix_reused_tokens"] >= reused[2]
        assert c.text == plain.submit(_request(turns)).result(timeout=60).text
    finally:
        pooled.close()
        plain.close()


def test_history_pool_gives_rows_of_one_batch_different_entries_and_respects_its_bound():
    from rhea.serve.cache import HistoryPool

    pool = HistoryPool(2)
    caches = pool.for_prompts([[1, 2, 3], [1, 2, 3], [4, 5]])
    assert caches[0] is not caches[1] and caches[2] is None  # two entries, both serving this batch
    assert pool.stats()["entries"] == 2
    assert HistoryPool(0).for_prompts([[1]]) == [None]
    with pytest.raises(ValueError):
        HistoryPool(-1)
