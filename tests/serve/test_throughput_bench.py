"""benchmarks/serve_throughput.py without a server: its histories, the bytes it counts, its ratios and its named
errors (the measured run starts `rhea serve` processes on a real model, so it runs as a benchmark, not here)."""
from pathlib import Path

import pytest

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_throughput.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(_PATH)


def test_histories_are_distinct_long_enough_and_alternate_roles(bench):
    tok = tiny_rhea().tokenizer
    args = bench.parse_args(["--history-tokens", "300", "--batches", "3"])
    convs = bench.histories(bench.pair_source(args), 3, 300, tok)
    assert len(convs) == 3 and len({c[0]["content"] + c[1]["content"] for c in convs}) == 3
    for messages in convs:
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
        content = sum(len(tok(m["content"], add_special_tokens=False)["input_ids"]) for m in messages)
        assert content >= 300


def test_bytes_held_count_the_prompt_reply_and_latents(bench):
    row = {"prompt_tokens": 100, "completion_tokens": 8, "latent_turns": 2}
    assert bench.held_bytes(row, kv_per_token=10, latent_each=1000) == 108 * 10 + 2 * 1000


def test_ratios_compare_equal_batches_and_equal_memory(bench):
    def entry(cps, mb):
        return {"rounds": [{"conversations_per_s": cps, "held_mb_per_conversation": mb, "answered": 8}]}
    result = {"policies": {"vanilla": {"8": entry(0.5, 400.0)}, "rhea": {"8": entry(1.0, 100.0)}}}
    r = bench.ratios(result)["rhea/batch8/round1"]
    assert r["conversations_per_s"] == pytest.approx(2.0) and r["held_mb_per_conversation"] == pytest.approx(0.25)
    assert r["conversations_per_s_per_gb"] == pytest.approx(8.0)  # 2x the rate at a quarter of the memory
    assert bench.ratios({"policies": {"rhea": {"8": entry(1.0, 100.0)}}}) == {}  # nothing to compare with


@pytest.mark.parametrize("argv, match", [
    (["--batches", "0"], "batch size must be 1 to 256"),
    (["--batches", "eight"], "write batch sizes"),
    (["--policies", "vanilla,nope"], "unknown"),
    (["--history-tokens", "0"], "--history-tokens must be >= 1"),
    (["--data", "/no/such/chats.json"], "no such file"),
])
def test_bad_options_are_named_errors(bench, argv, match):
    with pytest.raises(bench.ThroughputError, match=match):
        bench.parse_args(argv)
    assert bench.main(argv) == 2


def test_the_default_output_names_the_history_length_model_and_device(bench):
    args = bench.parse_args(["--history-tokens", "8000", "--model", "smollm2-135m"])
    assert args.out == "benchmarks/results/serve_throughput_8k_smollm2-135m_cpu"
