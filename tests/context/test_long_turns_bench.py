"""benchmarks/long_turns.py on a tiny random model: long turns are planned within the window and
answered on every turn, the budget is in every plan's decisions, and bad options are named errors."""
from pathlib import Path
import argparse

import pytest

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "long_turns.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(_PATH)


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


def test_texts_have_the_asked_token_counts_and_open_with_their_fact(bench, model):
    args = argparse.Namespace(turns=3, user_tokens=40, reply_tokens=90, seed=0)
    texts = bench.conversation_texts(model.tokenizer, args)
    assert len(texts) == 3
    for i, (user, reply) in enumerate(texts):
        tok = model.tokenizer  # word-level: words outside its vocabulary drop out of the fact
        fact = tok.decode(tok(f"Note {i}: the code for locker {i} is", add_special_tokens=False)["input_ids"], skip_special_tokens=True)
        assert user.startswith(fact)
        count = len(model.tokenizer(reply, add_special_tokens=False)["input_ids"])
        assert abs(count - 90) <= 2  # decode/encode round trip of a word-level tokenizer


@pytest.mark.parametrize("policy", ["vanilla", "rhea"])
def test_every_turn_fits_the_window_and_is_answered(bench, model, policy):
    args = argparse.Namespace(turns=5, user_tokens=100, reply_tokens=200, seed=0, max_new_tokens=4,
                              answer_every=2, window=None)
    rows = []
    s = bench.run_policy(model, policy, bench.conversation_texts(model.tokenizer, args), args, rows.append)
    assert s["ok"] and s["over_window"] == 0 and s["turns"] == 5 == s["budget_recorded"]
    assert s["answered"] == s["answered_asked"] == 3  # turns 0, 2 and the last
    assert s["prompt_limit"] == 508 and s["peak_rendered_tokens"] <= 508
    assert max(r["dropped"] for r in rows) >= 1  # five 300-token turns cannot all fit: the fit left some out
    assert [r["answered"] for r in rows] == [True, False, True, False, True]
    assert all(set(r["bytes_held"]) >= {"kv_cache", "latents"} for r in rows)
    assert bench.summarize_rows(rows, 5)["ok"]


def test_bad_options_are_named_errors(bench, tmp_path):
    with pytest.raises(bench.LongTurnsError, match="--turns 0 must be at least 1"):
        bench.parse_args(["--turns", "0"])
    with pytest.raises(bench.LongTurnsError, match="leaves no room"):
        bench.parse_args(["--window", "100"])
    with pytest.raises(bench.LongTurnsError, match="is a directory"):
        bench.parse_args(["--out", str(tmp_path)])
