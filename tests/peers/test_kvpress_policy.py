"""The kvpress peers: the compatibility patch, the prompt split, the policy through a session.

kvpress itself is an optional peer dependency (`make peers`); where it is not installed, a
stand-in module with kvpress's press interface (a context manager that registers a forward hook
with kwargs on every attention layer, reading ``past_key_values`` and ``cache_position``) runs
the same code paths. With kvpress installed the real presses run too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import types

import pytest
import torch

from rhea.context.conversation import Conversation, Turn
from rhea.peers import kvpress_policy as kp
from rhea.policies.registry import get_policy
from rhea.testing import tiny_rhea


@dataclasses.dataclass
class HalfPress:
    """kvpress's interface, pruning to the first half of the prefilled entries (the stand-in)."""

    compression_ratio: float = 0.5
    calls: list = dataclasses.field(default_factory=list)

    def forward_hook(self, module, input, kwargs, output):
        cache = kwargs["past_key_values"]  # the names kvpress 0.5.5 reads
        q_len = kwargs["hidden_states"].shape[1]
        position = kwargs["cache_position"]
        self.calls.append((module.layer_idx, q_len, position.tolist()))
        if int(position[-1]) + 1 != q_len:  # kvpress's is_prefilling: compress only the prefill
            return output
        layer = cache.layers[module.layer_idx]
        keep = int(layer.keys.shape[2] * (1 - self.compression_ratio))
        layer.keys, layer.values = layer.keys[:, :, :keep], layer.values[:, :, :keep]
        return output

    @contextlib.contextmanager
    def __call__(self, model):
        hooks = [layer.self_attn.register_forward_hook(self.forward_hook, with_kwargs=True)
                 for layer in model.model.layers]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()


@pytest.fixture
def fake_kvpress(monkeypatch):
    module = types.ModuleType("kvpress")
    for cls_name, _ in kp.PRESSES.values():
        setattr(module, cls_name, HalfPress)
    monkeypatch.setitem(sys.modules, "kvpress", module)
    return module


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


def _conversation():
    return Conversation([Turn("my cat is tom", "nice cat"), Turn("i live in paris", "lovely city")])


def test_split_prompt_is_the_full_prompt_cut_after_the_history(model):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    context, question = kp.split_prompt(model.tokenizer, history, "and now?")
    full = model.tokenizer.apply_chat_template(history + [{"role": "user", "content": "and now?"}],
                                               add_generation_prompt=True, tokenize=True)
    full = list(full["input_ids"] if hasattr(full, "keys") else full)
    assert context + question == full
    assert context and question
    assert kp.split_prompt(model.tokenizer, [], "q")[0] == []


def test_patched_hook_sees_kvpress_names_and_prefill_positions(model):
    press = kp.compatible(HalfPress(0.5))
    hf = model.base_model
    from transformers import DynamicCache

    from rhea.backends.llm import cache_keyword

    cache = DynamicCache()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.inference_mode(), model.disable_adapters(), press(hf):
        hf.model(input_ids=ids, **{cache_keyword(hf): cache})
    assert cache.get_seq_length() == 3  # every layer pruned to half of the 6 prefilled entries
    assert {c[2][0] for c in press.calls} == {0} and {c[2][-1] for c in press.calls} == {5}


def test_policy_answers_from_the_pruned_cache_through_a_session(model, fake_kvpress):
    from rhea.session.chat import ChatSession

    session = ChatSession(model, policy="kvpress-snapkv", max_new_tokens=3,
                          policy_kwargs={"compression_ratio": 0.5, "max_new_tokens": 3})
    for turn in _conversation():
        session.send(turn.user)
    plan = session.last_plan
    record = next(r for r in plan.decisions.records if r["event"] == "kvpress")
    assert record["kv_tokens_kept"] == record["context_tokens"] // 2
    assert record["kv_bytes"] > 0
    assert plan.ledger.text_tokens < plan.ledger.full_history_tokens
    assert session.records[-1].prompt_tokens == plan.ledger.text_tokens
    assert isinstance(session.policy.planned_answer(plan), str)


def test_keep_tokens_sets_the_ratio_per_turn(model, fake_kvpress):
    policy = get_policy("kvpress-knorm", model=model, keep_tokens=10, max_new_tokens=2)
    plan = policy.build(_conversation(), "where do i live")
    record = next(r for r in plan.decisions.records if r["event"] == "kvpress")
    assert record["kv_tokens_kept"] in (9, 10, 11)


def test_question_aware_press_sees_the_query(model, fake_kvpress):
    plain = get_policy("kvpress-snapkv", model=model, max_new_tokens=2).build(_conversation(), "where do i live")
    aware = get_policy("kvpress-snapkv-q", model=model, max_new_tokens=2).build(_conversation(), "where do i live")
    n = lambda p: next(r for r in p.decisions.records if r["event"] == "kvpress")["context_tokens"]  # noqa: E731
    assert n(aware) > n(plain)


def test_bad_options_are_named_errors(model, fake_kvpress):
    from rhea.errors import RheaConfigError

    for kwargs in ({"compression_ratio": 1.0}, {"compression_ratio": "half"}, {"keep_tokens": 0}, {"max_new_tokens": 0}):
        with pytest.raises(RheaConfigError):
            get_policy("kvpress-snapkv", model=model, **kwargs)


def test_without_kvpress_the_policy_says_how_to_get_it(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "kvpress", None)
    with pytest.raises(kp.PeerMissingError, match="make peers"):
        get_policy("kvpress-snapkv", model=model)


def test_real_kvpress_presses_prune_the_cache(model):
    pytest.importorskip("kvpress")
    for name in kp.PRESSES:
        policy = get_policy(f"kvpress-{name}", model=model, compression_ratio=0.5, max_new_tokens=2)
        long = Conversation([Turn(f"my cat is tom and i live in paris {i}", "nice cat lovely city") for i in range(12)])
        plan = policy.build(long, "where do i live")  # longer than SnapKV's 64-token window
        record = next(r for r in plan.decisions.records if r["event"] == "kvpress")
        assert 0 < record["kv_tokens_kept"] < record["context_tokens"], name


def test_a_context_shorter_than_the_press_window_is_kept_whole(model, fake_kvpress):
    class Windowed(HalfPress):
        window_size = 10_000  # longer than any context here: SnapKV cannot score it

    fake_kvpress.SnapKVPress = Windowed
    plan = get_policy("kvpress-snapkv", model=model, max_new_tokens=2).build(_conversation(), "where do i live")
    record = next(r for r in plan.decisions.records if r["event"] == "kvpress")
    assert record["compression_ratio"] == 0.0 and record["kv_tokens_kept"] == record["context_tokens"]


def test_the_pruned_cache_is_in_the_bytes_a_session_holds(model, fake_kvpress):
    from rhea.session.chat import ChatSession

    session = ChatSession(model, policy="kvpress-snapkv", max_new_tokens=3,
                          policy_kwargs={"compression_ratio": 0.5, "max_new_tokens": 3})
    for turn in _conversation():
        session.send(turn.user)
    record = next(r for r in session.last_plan.decisions.records if r["event"] == "kvpress")
    held = session.bytes_held()
    assert record["kv_bytes"] > 0 and held["kv_cache"] == record["kv_bytes"]  # the session generated nothing itself
    assert session.records[-1].bytes_held == sum(held.values()) >= record["kv_bytes"]
    layers = model.base_model.config.num_hidden_layers
    per_entry = record["kv_bytes"] // (layers * record["kv_tokens_kept"])
    assert per_entry * layers * record["kv_tokens_kept"] == record["kv_bytes"]  # keys + values of every kept entry


def test_an_environment_records_the_peer_libraries_installed(monkeypatch):
    """A peer's rows say which library version made them; where none is installed nothing is added."""
    from importlib import metadata

    import rhea.eval.environment as machine

    installed = {"kvpress": "0.5.5"}

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "version", version)
    assert machine.peer_versions() == {"kvpress": "0.5.5"}
    assert machine.environment()["kvpress"] == "0.5.5" and "llmlingua" not in machine.environment()
    installed.clear()
    assert machine.peer_versions() == {} and "kvpress" not in machine.environment()
