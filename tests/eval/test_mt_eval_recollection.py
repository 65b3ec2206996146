"""mt-eval-recollection: MT-Eval's instruction texts, its draw, the checks, a run (synthetic queries only)."""
import json

import pytest

from rhea.eval.runner import run_suite
from rhea.eval.suites import SuiteConfigError, get_suite
from rhea.eval.suites.mt_eval_recollection import INSTRUCTIONS, MTEvalRecollectionSuite, starts_with_emoji


def _data(tmp_path, n=25):
    ids = ["punctuation:no_comma", "startend:start_emoji", "change_case:lowercase"]
    path = tmp_path / "global_inst.jsonl"
    path.write_text("\n".join(json.dumps({"id": i, "query": f"Question number {i}?", "instructions": ids})
                              for i in range(n)))
    return str(path)


def test_episodes_follow_mt_eval(tmp_path):
    suite = get_suite("mt-eval-recollection", path=_data(tmp_path), n_episodes=6)
    eps = suite.generate(seed=0)
    # two dialogues per instruction type, going round the types in MT-Eval's order
    assert [e.meta["mt_eval_id"] for e in eps] == ["startend:start_emoji", "change_case:lowercase",
                                                   "punctuation:no_comma"] * 2
    for ep in eps:
        assert ep.history == [{"user": ep.meta["instruction"], "assistant": "ok.", "meta": {}}]
        assert ep.meta["instruction"].endswith("Keep all your responses under 200 words.")
        assert len(ep.turns) == 10 and {t.kind for t in ep.turns} == {"query"}
    # the two dialogues of one instruction draw their queries without replacement
    first, second = ({t.user for t in e.turns} for e in (eps[0], eps[3]))
    assert not first & second
    assert eps[1].meta["instruction"].startswith("All your responses in the upcoming conversation must be in all lower")
    with pytest.raises(SuiteConfigError, match="compatible queries"):
        get_suite("mt-eval-recollection", path=_data(tmp_path, n=15), n_episodes=6).generate()
    with pytest.raises(SuiteConfigError, match="exceeds"):
        get_suite("mt-eval-recollection", path=_data(tmp_path), n_episodes=7)


def test_a_short_run_spreads_over_the_types():
    eps = MTEvalRecollectionSuite(n_episodes=14).generate(seed=0)
    assert len({e.meta["mt_eval_id"] for e in eps}) == 14
    assert [e.meta["mt_eval_id"] for e in eps] == list(INSTRUCTIONS)


def test_checks():
    suite = MTEvalRecollectionSuite(n_episodes=28)
    eps = suite.generate(seed=3)
    assert len({e.meta["mt_eval_id"] for e in eps}) == len(INSTRUCTIONS) == 14
    by_id = {e.meta["mt_eval_id"]: e for e in eps}
    comma = by_id["punctuation:no_comma"].turns[0]
    assert suite.score_turn(comma, "Tea is good for most people in moderation.")["iar"] == 10.0
    assert suite.score_turn(comma, "Tea is good, mostly.")["iar"] == 0.0
    emoji = by_id["startend:start_emoji"].turns[0]
    assert suite.score_turn(emoji, "🍵 Tea is good for most people.")["followed"]
    assert not suite.score_turn(emoji, "Tea is good 🍵")["followed"]
    assert suite.score_turn(emoji, "")["non_answer"]  # a non-answer fails
    letter = by_id["startend:start_char"]
    wanted = letter.meta["spec"]["kwargs"]["letter"]
    assert f"with the letter {wanted}." in letter.meta["instruction"]
    assert suite.score_turn(letter.turns[0], f"{wanted.upper()}lways a good question to ask.")["followed"]
    assert starts_with_emoji("✨ hi") and not starts_with_emoji("hi")


def test_run_suite_smoke(tiny_model, tmp_path):
    result = run_suite(tiny_model, "mt-eval-recollection", ["vanilla", "rhea"], data=_data(tmp_path), n_episodes=2,
                       n_turns=3, max_new_tokens=4, progress=False, out=tmp_path / "run")
    for entry in result["policies"].values():
        agg = entry["aggregate"]
        assert agg["n_turns"] == 6 and 0.0 <= agg["iar"] <= 10.0 and set(agg["iar_by_turn"]) == {1, 2, 3}
        # the instruction turn is fed, not generated: every plan sees it as turn 0
        assert entry["turns"][0]["decisions"]["turns"][0]["turn"] == 0
    assert "| IAR (0-10) | IAR loose |" in (tmp_path / "run" / "summary.md").read_text()
    rhea_rows = result["policies"]["rhea"]["turns"]
    assert any(rhea_rows[0]["decisions"]["instructions"])  # the recognizer read the fed instruction
