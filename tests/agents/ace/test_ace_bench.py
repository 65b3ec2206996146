"""benchmarks/ace.py (resumable runs) and batched vote sampling (HFGenerator.generate_many)."""
from pathlib import Path

import pytest

from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "ace.py"

BABI = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Mary got the milk there.
4 Where is the milk?\tbathroom\t1 3
5 Daniel went back to the office.
6 Mary travelled to the garden.
7 Where is the milk?\tgarden\t6 3
8 John moved to the kitchen.
9 Where is John?\tkitchen\t8
"""


class CountingGenerator:
    """A TextGenerator with exact token counters; votes RETRIEVE, answers from the last fact it sees."""

    def __init__(self):
        self.prompt_tokens = self.completion_tokens = 0
        self.calls = self.many_calls = 0
        self.seed = 0

    def _reply(self, messages):
        text = " ".join(m["content"] for m in messages)
        if "RETRIEVE" in text and "THINK" in text:
            return "RETRIEVE"
        for place in ("kitchen", "garden", "bathroom"):
            if place in text:
                return place
        return "unknown"

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None):
        self.calls += 1
        self.prompt_tokens += 10
        self.completion_tokens += 1
        return self._reply(messages)

    def generate_many(self, messages, n, *, max_new_tokens=256, temperature=0.7, stop=None):
        self.many_calls += 1
        self.prompt_tokens += 10 * n
        self.completion_tokens += n
        return [self._reply(messages)] * n


@pytest.fixture
def bench(tmp_path):
    data = tmp_path / "qa2_test.txt"
    data.write_text(BABI)
    mod = load_script(SCRIPT)

    def parse(*extra):
        return build_args(mod, ["--data", str(data), "--max-rounds", "2", "--agents", "3", "--out", str(tmp_path / "ace"),
                                *extra])

    return mod, parse, tmp_path


def build_args(mod, argv):
    """The namespace main() would pass to run() for `argv` (its own parser and checks)."""
    captured = {}
    real_run = mod.run
    mod.run = lambda ns, llm=None: captured.setdefault("ns", ns)
    try:
        mod.main(argv)
    finally:
        mod.run = real_run
    return captured["ns"]


def test_resume_answers_only_new_questions_and_keeps_the_table(bench):
    import json

    mod, parse, tmp = bench
    llm = CountingGenerator()
    mod.run(parse("--n", "2"), llm=llm)
    first = json.loads((tmp / "ace.json").read_text())
    assert first["meta"]["n_questions"] == 2 and {r["n"] for r in first["table"]} == {2}
    calls_two = llm.calls + llm.many_calls

    llm2 = CountingGenerator()
    mod.run(parse("--n", "3"), llm=llm2)  # the sample is a prefix: 2 answered, 1 new
    after = json.loads((tmp / "ace.json").read_text())
    assert after["meta"]["n_questions"] == 3 and {r["n"] for r in after["table"]} == {3}
    assert [q["id"] for q in after["questions"][:2]] == [q["id"] for q in first["questions"]]
    assert 0 < llm2.calls + llm2.many_calls < calls_two  # one question's calls, not three
    assert llm2.many_calls >= 1  # round-2 votes: one batched call for the 3 agents
    rag = next(r for r in after["table"] if r["method"] == "rag (1 retrieval)")
    assert rag["correct"] == sum(q["results"][1]["correct"] for q in after["questions"])
    ace2 = next(r for r in after["table"] if r["method"] == "ace N=2")
    assert ace2["accuracy_minus_rag"]["n"] == 3 and "p_value" in ace2["accuracy_minus_rag"]
    assert rag["accuracy_minus_rag"] is None

    llm3 = CountingGenerator()
    mod.run(parse("--n", "3"), llm=llm3)  # nothing left: no call, same table
    assert llm3.calls + llm3.many_calls == 0
    assert json.loads((tmp / "ace.json").read_text())["table"] == after["table"]


def test_resume_refuses_other_settings_and_no_resume_starts_over(bench):
    from rhea.eval.checkpoint import BenchError

    mod, parse, tmp = bench
    mod.run(parse("--n", "1"), llm=CountingGenerator())
    with pytest.raises(BenchError, match="--max-rounds 2"):
        mod.run(build_args(mod, ["--data", str(tmp / "qa2_test.txt"), "--max-rounds", "3", "--agents", "3",
                                 "--out", str(tmp / "ace"), "--n", "1"]), llm=CountingGenerator())
    llm = CountingGenerator()
    mod.run(parse("--n", "1", "--no-resume"), llm=llm)
    assert llm.calls > 0
    (tmp / "ace.json").write_text("not json")
    with pytest.raises(BenchError, match="not a results file"):
        mod.run(parse("--n", "1"), llm=CountingGenerator())


def test_sample_charges_a_batched_call_as_n_calls():
    from rhea.agents.ace.tokens import MeteredLLM, RoundTokens

    msgs = [{"role": "user", "content": "RETRIEVE or THINK?"}]
    batched, looped = CountingGenerator(), CountingGenerator()
    looped.generate_many = None  # a generator without the capability is called n times
    t_b, t_l = RoundTokens(), RoundTokens()
    assert MeteredLLM(batched).sample("voting", msgs, t_b, 5, max_new_tokens=4, temperature=0.7) == ["RETRIEVE"] * 5
    assert MeteredLLM(looped).sample("voting", msgs, t_l, 5, max_new_tokens=4, temperature=0.7) == ["RETRIEVE"] * 5
    assert (batched.many_calls, batched.calls, looped.calls) == (1, 0, 5)
    assert t_b.to_dict() == t_l.to_dict() and t_b.total == 55
    greedy = CountingGenerator()
    MeteredLLM(greedy).sample("voting", msgs, RoundTokens(), 3, max_new_tokens=4, temperature=0.0)
    assert (greedy.many_calls, greedy.calls) == (0, 3)


def test_generate_many_on_a_tiny_model_counts_each_row_to_its_eos():
    import torch

    from rhea.backends.llm import HFGenerator
    from rhea.errors import RheaConfigError
    from rhea.testing import tiny_rhea

    model = tiny_rhea().eval()
    gen = HFGenerator(model, seed=3)
    msgs = [{"role": "user", "content": "Pick one word."}]
    replies = gen.generate_many(msgs, 4, max_new_tokens=6, temperature=1.0)
    assert len(replies) == 4 and all(isinstance(r, str) for r in replies)
    prompt_len = gen.prompt_tokens // 4
    assert gen.prompt_tokens == 4 * prompt_len and 4 <= gen.completion_tokens <= 24
    # one row alone matches generate(): the same seed, the same sampled reply and counts
    a, b = HFGenerator(model, seed=7), HFGenerator(model, seed=7)
    assert a.generate(msgs, max_new_tokens=6, temperature=1.0) == b.generate_many(msgs, 1, max_new_tokens=6,
                                                                                   temperature=1.0)[0]
    assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens)
    with pytest.raises(RheaConfigError, match="temperature"):
        gen.generate_many(msgs, 2, temperature=0.0)
    with pytest.raises(RheaConfigError, match="n=0"):
        gen.generate_many(msgs, 0)
    assert torch.is_grad_enabled()
