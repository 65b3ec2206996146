"""The LLMLingua peers: offline token counting, the missing-package error, a real compression.

llmlingua is an optional peer dependency (`make peers`); the real compression runs where it is
installed (on the embedded model as the scorer), and skips elsewhere.
"""
from __future__ import annotations

import sys
import types

import pytest

from rhea.context.conversation import Conversation, Turn
from rhea.peers import llmlingua_policy as lp
from rhea.peers.kvpress_policy import PeerMissingError
from rhea.policies.registry import get_policy


def test_counter_counts_with_the_model_tokenizer():
    from rhea.testing import tiny_tokenizer

    tok = tiny_tokenizer(["alpha", "beta"])
    counter = lp.TokenizerCounter(tok)
    ids = counter.encode("alpha beta")
    assert ids == tok("alpha beta", add_special_tokens=False)["input_ids"]
    assert "alpha" in counter.decode(ids)


def test_offline_counter_puts_tiktoken_back():
    def fetch(name):
        raise AssertionError("would download the encoding")

    module = types.SimpleNamespace(tiktoken=types.SimpleNamespace(encoding_for_model=fetch))
    with lp.offline_counter(module):
        assert isinstance(module.tiktoken.encoding_for_model("gpt-3.5-turbo"), lp._Deferred)
    assert module.tiktoken.encoding_for_model is fetch


def test_without_llmlingua_the_policy_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "llmlingua", None)
    with pytest.raises(PeerMissingError, match="make peers"):
        get_policy("llmlingua")


@pytest.mark.parametrize("kwargs", [{"rate": 0}, {"rate": 1.5}, {"target_tokens": 0}, {"scorer": ""}])
def test_bad_options_are_named_errors_before_any_load(kwargs, monkeypatch):
    from rhea.errors import RheaConfigError

    monkeypatch.setattr(lp, "_compressor", lambda *a: pytest.fail("loaded a scorer for bad options"))
    with pytest.raises(RheaConfigError):
        get_policy("llmlingua", **kwargs)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["llmlingua", "longllmlingua"])
def test_real_llmlingua_compresses_the_history_offline(name, monkeypatch):
    pytest.importorskip("llmlingua")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from rhea.modeling.zoo import load_base_model

    _, tok = load_base_model("smollm2-135m")
    conv = Conversation([Turn("My cat is called Tom and he is orange. He sleeps on the sofa all afternoon.",
                              "Tom sounds lovely! Orange cats are often very friendly and calm."),
                         Turn("I live in Paris near the river, in a small flat on the fifth floor.",
                              "Paris is beautiful, and living near the Seine must be lovely.")])
    plan = get_policy(name, rate=0.5, tokenizer=tok).build(conv, "What is my cat called?")
    record = plan.decisions.records[0]
    assert record["compressed_tokens"] < record["origin_tokens"]
    assert plan.messages[0]["role"] == "system" and lp.HEADER in plan.messages[0]["content"]
    assert [d.tier for d in plan.decisions.turns] == ["drop", "drop"]
    assert record["kept_tokens"] < plan.ledger.full_history_tokens
