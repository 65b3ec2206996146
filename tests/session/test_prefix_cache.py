"""Session KV reuse (HistoryKVCache, and the instruction-block PrefixKVCache): reused across turns, invalidated on every change, exact."""
import pytest
import torch

from rhea.context import ContextPlan
from rhea.session import ChatSession
from rhea.session.generation import PrefixKVCache, generate_from_plan
from rhea.testing import tiny_rhea

SCRIPT = [
    "from now on always answer in french .",
    "what is the capital of france ?",
    "what color is the cat ?",
    "the dog and the cat",
    "stop answering in french .",
    "what is the weather ?",
]


def _pair(model, policy="rhea", **kw):
    on = ChatSession(model, policy=policy, max_new_tokens=6, **kw)
    off = ChatSession(model, policy=policy, max_new_tokens=6, reuse_prefix_cache=False, **kw)
    return on, off


@pytest.mark.parametrize("anchor_bias", [0.0, 1.5])
def test_replies_token_exact_with_and_without_reuse(anchor_bias):
    model = tiny_rhea(anchor_bias=anchor_bias) if anchor_bias else tiny_rhea()
    on, off = _pair(model)
    reused = []
    for q in SCRIPT:
        a, b = on.send(q), off.send(q)
        assert a == b, (q, a, b)
        assert on.records[-1].prompt_tokens == off.records[-1].prompt_tokens
        assert off.records[-1].timings["prefix_reused_tokens"] == 0
        reused.append(on.records[-1].timings["prefix_reused_tokens"])
    # turn 0 has nothing to reuse; later turns reuse the history up to what changed
    assert reused[0] == 0 and all(r > 0 for r in reused[1:4]), reused
    assert reused[1] < reused[2] < reused[3], reused  # the common prefix grows with the conversation
    if anchor_bias:  # the revocation empties the anchored block: nothing computed under it is reused
        assert reused[4] == 0, reused
    assert on.prefix_cache.hits == sum(r > 0 for r in reused) and on.prefix_cache.reused_tokens == sum(reused)
    assert off.prefix_cache is None


@pytest.mark.parametrize("adapter", ["generate", "base"])
def test_generate_token_exact_on_longer_replies(adapter):
    model = tiny_rhea()
    plan = ContextPlan([{"role": "system", "content": "always answer in french . never use the cat ."},
                        {"role": "user", "content": "what is the capital of france ?"}])
    cache = PrefixKVCache()
    kw = dict(max_new_tokens=24, repetition_penalty=1.0, adapter=adapter)
    plain = generate_from_plan(model, plan, **kw)
    first = generate_from_plan(model, plan, prefix_cache=cache, **kw)
    second = generate_from_plan(model, plan, prefix_cache=cache, **kw)
    assert plain.text == first.text == second.text and plain.new_tokens == second.new_tokens
    assert (cache.misses, cache.hits) == (1, 1) and second.timings["prefix_reused_tokens"] == len(cache) > 0
    other = generate_from_plan(model, plan, prefix_cache=cache, **{**kw, "adapter": "generate" if adapter == "base" else "base"})
    assert cache.misses == 2 and other.timings["prefix_reused_tokens"] == 0


def test_cache_invalidates_on_adapter_weights_model_and_policy_change():
    model = tiny_rhea()
    chat = ChatSession(model, policy="rhea", max_new_tokens=2)
    chat.send("from now on always answer in french .")
    chat.send("the cat")
    chat.send("the dog")
    assert (chat.prefix_cache.misses, chat.prefix_cache.hits) == (1, 2)
    chat.send("from now on never use the word cat .")  # IM changes the block: reuse stops at the change
    after_im = chat.records[-1].timings["prefix_reused_tokens"]
    assert 0 < after_im < chat.records[-2].timings["prefix_reused_tokens"]
    with torch.no_grad():  # an in-place weight update (an optimizer step) makes everything stale
        next(p for n, p in model.named_parameters() if "lora_B" in n and "generate" in n).add_(0.01)
    chat.send("the dog")
    assert chat.records[-1].timings["prefix_reused_tokens"] == 0 and chat.prefix_cache.misses == 2
    chat.set_policy("rhea-all-raw")  # a policy switch drops the cache
    assert len(chat.prefix_cache) == 0
    chat.send("the cat")
    assert chat.prefix_cache.misses == 3
    chat.send("the cat")
    assert chat.records[-1].timings["prefix_reused_tokens"] > 0
    chat.adapter = "base"  # another adapter computes other keys/values
    chat.send("the dog")
    assert chat.prefix_cache.misses == 4
    chat.model = tiny_rhea(seed=1)
    chat.send("the dog")
    assert chat.prefix_cache.misses == 5


def test_changed_latent_stops_reuse_at_its_slot():
    """A <mem> slot is the same token whatever latent it holds: reuse must stop where one changed."""
    from rhea.session.history_cache import HistoryKVCache

    model = tiny_rhea()
    mem = model.mem_token_id
    cache = HistoryKVCache()
    lat = torch.randn(2, 8)
    kv = [(torch.zeros(1, 1, 6, 4), torch.zeros(1, 1, 6, 4))]
    cache.store(model, [1, 2, mem, mem, 5, 6], lat, 0, "generate", kv)
    assert cache.reusable(model, [1, 2, mem, mem, 5, 6, 7], lat, 0, "generate") == 6
    assert cache.reusable(model, [1, 2, mem, mem, 5, 6], lat, 0, "generate") == 5  # one token left to prefill
    other = lat.clone()
    other[1] += 1
    assert cache.reusable(model, [1, 2, mem, mem, 5, 6, 7], other, 0, "generate") == 3
    assert cache.reusable(model, [1, 2, mem, mem, 5, 6, 7], None, 0, "generate") == 2
    assert cache.reusable(model, [1, 9, mem], lat, 0, "generate") == 1
    assert cache.reusable(model, [1, 2, mem, mem, 5, 6, 7], lat, 0, "base") == 0
    assert cache.reusable(tiny_rhea(seed=1), [1, 2, mem, mem, 5, 6, 7], lat, 0, "generate") == 0


def test_batched_rows_reuse_their_own_history_and_match_unbatched():
    from rhea.session.batch import send_batch

    model = tiny_rhea(anchor_bias=1.5)
    on = [ChatSession(model, policy="rhea", max_new_tokens=5) for _ in range(3)]
    off = [ChatSession(model, policy="rhea", max_new_tokens=5, reuse_prefix_cache=False) for _ in range(3)]
    for t in range(5):
        texts = [SCRIPT[(t + k) % len(SCRIPT)] + " the cat" * k for k in range(3)]  # rows of other lengths
        assert send_batch(on, texts) == send_batch(off, texts)
    reused = [[r.timings["prefix_reused_tokens"] for r in c.records] for c in on]
    # every row reuses its own history, except where an instruction or its revocation changes the anchored block
    assert all(sum(r > 0 for r in row[1:]) >= 2 for row in reused), reused
    assert len({row[2] for row in reused}) > 1, reused  # rows of other lengths reuse other amounts


def test_replies_exact_after_invalidation_and_with_latents():
    """Latent turns after the block still match (the rhea-drop-all/all-raw ablations too)."""
    model = tiny_rhea()
    for policy in ("reply-soft-compress", "rhea-all-raw"):
        on, off = _pair(model, policy=policy)
        for q in SCRIPT[:4]:
            assert on.send(q) == off.send(q)


def test_option_persists_and_validates(tmp_path):
    model = tiny_rhea()
    chat = ChatSession(model, policy="rhea", max_new_tokens=2, reuse_prefix_cache=False)
    chat.send("from now on always answer in french .")
    back = ChatSession.load(chat.save(tmp_path / "s"), model)
    assert back.prefix_cache is None
    with pytest.raises(TypeError, match="reuse_prefix_cache"):
        ChatSession(model, reuse_prefix_cache="yes")


def test_blocks_holding_latents_or_nothing_after_them_are_not_cached():
    model = tiny_rhea()
    mem = model.mem_token_id
    assert not PrefixKVCache.usable(model, torch.tensor([[1, 2, 3]]), 0)
    assert not PrefixKVCache.usable(model, torch.tensor([[1, 2, 3]]), 3)
    assert not PrefixKVCache.usable(model, torch.tensor([[1, mem, 3, 4]]), 3)
    assert PrefixKVCache.usable(model, torch.tensor([[1, 2, 3, 4]]), 3)


def test_set_policy_carries_the_instructions_over():
    model = tiny_rhea()
    chat = ChatSession(model, policy="vanilla", max_new_tokens=2)
    for q in ["from now on always answer in french .", "the cat", "from now on never use the word dog .",
              "stop answering in french ."]:
        chat.send(q)
    chat.set_policy("rhea-all-raw")
    assert [e.text for e in chat.policy.im.entries] == ["from now on never use the word dog ."]
    assert [h.action for h in chat.policy.im.history] == ["add", "add", "revoke"]
    chat.send("the dog")
    assert chat.last_plan.decisions.instructions == ["from now on never use the word dog ."]
    chat.set_policy("rhea-no-im")  # no instructional memory: nothing replayed
    assert len(chat.policy.im) == 0


def test_set_policy_replays_the_memory_log_a_live_policy_keeps():
    """One-off requests included: catching up logs what answering every turn would have."""
    model = tiny_rhea()
    turns = ["from now on always answer in french .", "rewrite your previous answer in english .", "the cat",
             "stop answering in french ."]
    switched, live = ChatSession(model, policy="vanilla", max_new_tokens=2), ChatSession(model, policy="rhea-all-raw",
                                                                                         max_new_tokens=2)
    for q in turns:
        switched.send(q)
        live.send(q)
    switched.set_policy("rhea-all-raw")
    actions = [h.action for h in switched.policy.im.history]
    assert "one-off-ignored" in actions and actions == [h.action for h in live.policy.im.history]
    assert [(h.text, h.turn) for h in switched.policy.im.history] == [(h.text, h.turn) for h in live.policy.im.history]


def test_history_cache_needs_one_sequence_per_row_and_one_cache_per_plan():
    from rhea.session.batch import generate_batch
    from rhea.session.history_cache import HistoryKVCache, reuse_allowed

    assert reuse_allowed({}) and reuse_allowed({"do_sample": True})
    assert not reuse_allowed({"num_beams": 2}) and not reuse_allowed({"num_return_sequences": 2})
    assert not reuse_allowed({"use_cache": False}) and not reuse_allowed({"cache": object()})
    model = tiny_rhea()
    plan = ContextPlan([{"role": "user", "content": "what is the capital of france ?"}])
    cache = HistoryKVCache()
    with pytest.raises(ValueError, match="one cache"):
        generate_batch(model, [plan, plan], caches=[cache])
