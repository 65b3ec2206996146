"""Episodes in a batch: K sessions' turns generated together give the replies one-by-one gives,
write the same checkpoints, and resume."""
import json

import pytest

from rhea.eval.runner import BenchError, run_suite
from rhea.session import ChatSession
from rhea.session.batch import BatchError, send_batch
from rhea.testing import tiny_rhea

MESSAGES = [["hello", "tell me more about it please"], ["a much longer opening message with many words", "ok"],
            ["From now on, answer in French.", "why is the sky blue?"]]


@pytest.fixture(scope="module")
def model():
    return tiny_rhea().eval()


@pytest.mark.parametrize("policy", ["vanilla", "rhea", "recent-k", "summary"])
def test_a_batch_answers_like_one_by_one(model, policy):
    one = [ChatSession(model, policy=policy, max_new_tokens=4, reuse_prefix_cache=False) for _ in MESSAGES]
    many = [ChatSession(model, policy=policy, max_new_tokens=4) for _ in MESSAGES]
    for t in range(2):
        expected = [s.send(m[t]) for s, m in zip(one, MESSAGES)]
        got = send_batch(many, [m[t] for m in MESSAGES])
        assert got == expected
    for a, b in zip(one, many):
        assert [t.assistant for t in a.conversation] == [t.assistant for t in b.conversation]
        assert [r.prompt_tokens for r in a.records] == [r.prompt_tokens for r in b.records]
        assert [r.latent_slots for r in a.records] == [r.latent_slots for r in b.records]
        assert all(r.timings["batch_rows"] == 3.0 for r in b.records)


def test_rolling_summaries_are_rewritten_in_one_batch(model, monkeypatch):
    from rhea.backends.llm import HFGenerator

    calls = []
    real = HFGenerator.generate_batch
    monkeypatch.setattr(HFGenerator, "generate_batch",
                        staticmethod(lambda gens, convs, **kw: calls.append(len(gens)) or real(gens, convs, **kw)))
    chats = [ChatSession(model, policy="summary", max_new_tokens=3, policy_kwargs={"max_summary_tokens": 8})
             for _ in MESSAGES]
    send_batch(chats, [m[0] for m in MESSAGES])
    assert calls == [3]  # three sessions' summaries, one batch
    assert all(c.policy.updates == 1 or c.policy.pending for c in chats)
    assert all(r.timings["observe_s"] > 0 for c in chats for r in c.records)


def test_a_row_that_overflows_fails_alone(model):
    chats = [ChatSession(model, policy="vanilla", max_new_tokens=4) for _ in range(2)]
    limit = model.max_context
    too_long = " ".join(["word"] * (limit or 10_000))
    out = send_batch(chats, ["hi", too_long])
    # a message alone over the window is refused before planning (ContextWindowError, a ContextOverflowError)
    assert isinstance(out[0], str) and type(out[1]).__name__ == "ContextWindowError"
    assert len(chats[0].conversation) == 1 and len(chats[1].conversation) == 0


def test_sessions_must_share_settings(model):
    a = ChatSession(model, policy="vanilla", max_new_tokens=4)
    b = ChatSession(model, policy="vanilla", max_new_tokens=5)
    with pytest.raises(BatchError, match="share the model"):
        send_batch([a, b], ["x", "y"])
    with pytest.raises(BatchError, match="one text per session"):
        send_batch([a], ["x", "y"])


def test_run_suite_in_batches_matches_one_by_one_and_resumes(model, tmp_path):
    settings = dict(n_turns=4, n_episodes=5, max_new_tokens=3, progress=False,
                    suite_kwargs={"n_instructions": 2, "n_revoke": 1})
    one = run_suite(model, "instruction-retention", ["vanilla", "rhea"], out=tmp_path / "one", **settings)
    many = run_suite(model, "instruction-retention", ["vanilla", "rhea"], out=tmp_path / "many", batch_episodes=2,
                     **settings)
    for policy in ("vanilla", "rhea"):
        a, b = one["policies"][policy], many["policies"][policy]
        assert [r["reply"] for r in a["turns"]] == [r["reply"] for r in b["turns"]]
        assert [r["episode_id"] for r in a["turns"]] == [r["episode_id"] for r in b["turns"]]
        assert a["aggregate"]["iar"] == b["aggregate"]["iar"]
        assert {r.get("batch_rows") for r in b["turns"]} == {2.0, 1.0}  # 5 episodes: 2 + 2 + 1
        for n in range(5):
            state = tmp_path / "many" / "state" / policy / str(n)
            assert (state / "done").is_file() and (state / "session").is_dir()
            assert len((state / "rows.jsonl").read_text().splitlines()) == 4
    saved = json.loads((tmp_path / "many" / "results.json").read_text())
    assert saved["statistics"]["n_episodes"] == 5
    again = run_suite(model, "instruction-retention", ["vanilla", "rhea"], out=tmp_path / "many",
                      batch_episodes=2, **settings)
    assert [r["reply"] for r in again["policies"]["rhea"]["turns"]] == [
        r["reply"] for r in many["policies"]["rhea"]["turns"]]
    with pytest.raises(BenchError, match="batch_episodes=0"):
        run_suite(model, "efficiency", ["vanilla"], batch_episodes=0, progress=False)


def test_an_interrupted_batched_run_resumes_in_a_batch(model, tmp_path):
    """Episodes cut at different turns (a session that ended mid-run) continue together in one batch,
    joining it as they catch up, and end with the replies of an uninterrupted run."""
    settings = dict(n_turns=4, n_episodes=3, max_new_tokens=3, progress=False,
                    suite_kwargs={"n_instructions": 2, "n_revoke": 1}, batch_episodes=3)
    whole = run_suite(model, "instruction-retention", ["rhea"], out=tmp_path / "whole", **settings)
    cut = tmp_path / "cut"
    run_suite(model, "instruction-retention", ["rhea"], out=cut, **settings)
    for n, keep in enumerate([1, 2, 4]):  # episode 2 finished; 0 and 1 stopped after 1 and 2 turns
        state = cut / "state" / "rhea" / str(n)
        lines = (state / "rows.jsonl").read_text().splitlines()[:keep]
        (state / "rows.jsonl").write_text("".join(line + "\n" for line in lines))
        if keep < 4:
            (state / "done").unlink()
            # the session saved after turn `keep`, as an interruption there leaves it
            replay = ChatSession(model, policy="rhea", max_new_tokens=3)
            for row in lines:
                replay.send(json.loads(row)["user"])
            replay.save(state / "session")
    resumed = run_suite(model, "instruction-retention", ["rhea"], out=cut, **settings)
    rows = resumed["policies"]["rhea"]["turns"]
    assert [r["reply"] for r in rows] == [r["reply"] for r in whole["policies"]["rhea"]["turns"]]
    # episode 0 ran turn 1 alone, then turns 2-3 beside episode 1: batching survived the resume
    fresh = [r.get("batch_rows") for r in rows[:4]][1:]
    assert fresh == [1.0, 2.0, 2.0]
    assert all((cut / "state" / "rhea" / str(n) / "done").is_file() for n in range(3))


def test_a_committed_run_without_checkpoints_runs_only_the_added_policy(model, tmp_path, monkeypatch):
    import shutil

    from rhea.eval import runner

    settings = dict(n_turns=4, n_episodes=2, max_new_tokens=3, progress=False,
                    suite_kwargs={"n_instructions": 2, "n_revoke": 1})
    first = run_suite(model, "instruction-retention", ["vanilla"], out=tmp_path, **settings)
    shutil.rmtree(tmp_path / "state")  # what a clean checkout of a committed run holds
    ran = []
    real = runner.run_episode
    monkeypatch.setattr(runner, "run_episode", lambda m, t, policy, *a, **k: ran.append(policy) or real(m, t, policy, *a, **k))
    both = run_suite(model, "instruction-retention", ["vanilla", "recent-k"], out=tmp_path, **settings)
    assert ran == ["recent-k", "recent-k"]  # vanilla's 8 turns came from results.json
    assert both["policies"]["vanilla"]["turns"] == json.loads(json.dumps(first["policies"]["vanilla"]["turns"]))
    assert both["policies"]["vanilla"]["aggregate"] == first["policies"]["vanilla"]["aggregate"]
    # a results.json of other settings is not reused: every policy runs
    other = run_suite(model, "instruction-retention", ["vanilla"], out=tmp_path / "x", **settings)
    (tmp_path / "x" / "results.json").write_text(json.dumps({**other, "config": {**other["config"], "seed": 5}}))
    shutil.rmtree(tmp_path / "x" / "state")
    ran.clear()
    run_suite(model, "instruction-retention", ["vanilla"], out=tmp_path / "x", **settings)
    assert ran == ["vanilla", "vanilla"]


def test_long_horizon_judges_each_turn_index_in_one_batch(model, tmp_path):
    """K episodes' replies of one turn are rated in one judge call, with the ratings one by one gives."""
    from rhea.backends.llm import ScriptedGenerator
    from rhea.eval.judge import Judge

    class CountingJudge(Judge):
        def __init__(self):
            super().__init__(ScriptedGenerator([f"Rating: [[{1 + k % 10}]]" for k in range(200)]))
            self.sizes = []

        def judge_many(self, requests):
            self.sizes.append(len(requests))
            return super().judge_many(requests)

    settings = dict(n_turns=6, n_episodes=3, max_new_tokens=3, progress=False)
    one_judge, many_judge = CountingJudge(), CountingJudge()
    one = run_suite(model, "long-horizon", ["vanilla"], out=tmp_path / "one",
                    suite_kwargs={"n_facts": 1, "judge": one_judge}, **settings)
    many = run_suite(model, "long-horizon", ["vanilla"], out=tmp_path / "many", batch_episodes=3,
                     suite_kwargs={"n_facts": 1, "judge": many_judge}, **settings)
    assert set(one_judge.sizes) == {1} and len(one_judge.sizes) == 3 * 4  # 4 question turns per episode
    assert many_judge.sizes == [3, 3, 3, 3]  # one call per question turn index, every episode in it
    a, b = one["policies"]["vanilla"]["turns"], many["policies"]["vanilla"]["turns"]
    assert [r["reply"] for r in a] == [r["reply"] for r in b]
    assert sum(r.get("judge_rating") is not None for r in b) == 12
    assert [r.get("judge_prompt") for r in a] == [r.get("judge_prompt") for r in b]


def test_the_batched_episodes_benchmark_times_a_judged_long_horizon_run(tmp_path, monkeypatch):
    import rhea.modeling.loading as loading
    from pathlib import Path

    from tests.repo_scripts import load_script

    module = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "batched_episodes.py")
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: tiny_rhea().eval())
    out = tmp_path / "lh"
    assert module.main(["--model", "tiny", "--suite", "long-horizon", "--judge-local", "tiny", "--episodes", "2",
                        "--turns", "5", "--k", "1,2", "--policies", "vanilla", "--max-new-tokens", "2",
                        "--judge-max-new-tokens", "16", "--out", str(out)]) == 0
    saved = json.loads(out.with_suffix(".json").read_text())
    assert [r["k"] for r in saved["rows"]] == [1, 2] and out.with_suffix(".png").is_file()
    assert all(r["judged_replies"] == 2 * 3 and r["ratings_same_as_k1"] == 2 * 5 for r in saved["rows"])
    assert "judge tiny (16 new tokens)" in saved["meta"]["suite"]
    with pytest.raises(SystemExit):  # a judge without the suite it rates
        module.main(["--model", "tiny", "--judge-local", "tiny", "--out", str(out)])
