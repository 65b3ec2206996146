"""benchmarks/judge_consistency.py: a second judge's ratings of two policies' replies, set against the run's judge."""
import json
from pathlib import Path

import pytest

from rhea.eval.judge import Judge
from rhea.eval.judge_run import judge_run
from rhea.eval.runner import run_suite
from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "judge_consistency.py"


class Rater:
    """Rates by the prompt (deterministic); `flip` turns the rating upside down (a judge that disagrees)."""

    def __init__(self, flip=False):
        self.flip, self.calls = flip, 0

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls += 1
        k = 1 + sum(map(ord, "".join(m["content"] for m in messages))) % 10
        return f"Fine. Rating: [[{11 - k if self.flip else k}]]"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    out = tmp_path_factory.mktemp("lh") / "run"
    run_suite(tiny_rhea().eval(), "long-horizon", ["vanilla", "recent-k"], n_turns=7, n_episodes=3,
              max_new_tokens=3, progress=False, suite_kwargs={"n_facts": 1}, out=out, batch_episodes=3)
    judge_run(out, Judge(Rater()), progress=False)
    return out


def test_the_same_judge_agrees_with_itself_and_a_flipped_one_does_not(judged, tmp_path):
    module = load_script(SCRIPT)
    same = Judge(Rater(), max_new_tokens=32)  # same ratings, other settings (so not refused as the run's judge)
    assert module.main(["--run", str(judged), "--pairs", "6", "--out", str(tmp_path / "same")], judge=same) == 0
    s = json.loads((tmp_path / "same.json").read_text())["summary"]
    assert s["pairs_rated"] == 6 and len(s["table"]) == 6 and same.generator.calls == 12
    assert s["mean_abs_difference"]["value"] == 0
    assert s["pearson"]["value"] == pytest.approx(1.0)
    assert s["difference_run_judge"]["value"] == s["difference_second_judge"]["value"]
    assert (tmp_path / "same.png").is_file() and "Pearson" in (tmp_path / "same.md").read_text()

    flipped = Judge(Rater(flip=True), max_new_tokens=32)
    assert module.main(["--run", str(judged), "--pairs", "6", "--out", str(tmp_path / "flip")], judge=flipped) == 0
    f = json.loads((tmp_path / "flip.json").read_text())["summary"]
    assert f["pearson"]["value"] == pytest.approx(-1.0)  # the tiny model's replies draw several ratings
    assert f["difference_second_judge"]["value"] == pytest.approx(-f["difference_run_judge"]["value"])


def test_resumes_without_rating_twice_and_refuses_bad_input(judged, tmp_path):
    module = load_script(SCRIPT)
    out = str(tmp_path / "c")
    first = Judge(Rater(), max_new_tokens=32)
    module.main(["--run", str(judged), "--pairs", "4", "--out", out], judge=first)
    again = Judge(Rater(), max_new_tokens=32)
    module.main(["--run", str(judged), "--pairs", "4", "--out", out], judge=again)
    assert first.generator.calls == 8 and again.generator.calls == 0
    module.main(["--run", str(judged), "--pairs", "4", "--out", out])  # no judge needed: everything is rated
    with pytest.raises(SystemExit):  # another judge on the same rows
        module.main(["--run", str(judged), "--pairs", "4", "--out", out], judge=Judge(Rater(), max_new_tokens=16))
    with pytest.raises(SystemExit):  # the run's own judge
        module.main(["--run", str(judged), "--out", str(tmp_path / "d")], judge=Judge(Rater()))
    with pytest.raises(SystemExit):
        module.main(["--run", str(judged), "--policies", "vanilla,nope", "--out", str(tmp_path / "e")], judge=first)
    with pytest.raises(SystemExit):
        module.main(["--run", str(tmp_path / "missing"), "--out", str(tmp_path / "f")], judge=first)


def test_preference_agreement_counts_the_pairs_neither_judge_ties():
    module = load_script(SCRIPT)
    # per turn: run's judge (a, b), second judge (a, b): agree, disagree, agree, tie for the run's judge, unrated
    cells = [((8, 5), (7, 6)), ((4, 6), (6, 5)), ((3, 9), (2, 4)), ((5, 5), (9, 1)), ((5, 6), (None, 4))]
    results = {"policies": {p: {"turns": [{"episode_id": "e", "turn_index": t, "kind": "query",
                                           "judge_rating": cells[t][0][i]} for t in range(len(cells))]}
                            for i, p in enumerate(("a", "b"))}}
    second = {(p, "e", t): {"rating": cells[t][1][i]} for t in range(len(cells)) for i, p in enumerate(("a", "b"))}
    pairs = module.paired_turns(results, ("a", "b"))
    assert pairs == [("e", t) for t in range(5)] and module.draw(pairs, 9, 0) == pairs
    for p in ("a", "b"):
        for t, row in enumerate(results["policies"][p]["turns"]):
            row["reply"] = f"{p} answers {t}"
    for t, p in ((1, "a"), (1, "b"), (2, "a")):  # turn 1 answered alike, turn 2 not
        results["policies"][p]["turns"][t]["reply"] = "same"
    assert module.paired_turns(results, ("a", "b"), differing=True) == [("e", t) for t in (0, 2, 3, 4)]
    s = module.summarise(results, ("a", "b"), pairs, second)
    assert s["pairs_rated"] == 4 and s["pairs_both_decided"] == 3 and s["ties_run_judge"] == 1
    assert s["preference_agreement"]["value"] == pytest.approx(2 / 3)
    assert s["difference_run_judge"]["value"] == pytest.approx((3 - 2 - 6 + 0) / 4)
    assert s["difference_second_judge"]["value"] == pytest.approx((1 + 1 - 2 + 8) / 4)
    assert module._spearman([1, 2, 2, 3], [1, 3, 3, 4]) == pytest.approx(1.0)
