import pytest

from .eval_fixtures import (BABI_QA1, IFEVAL, MT_BENCH_JSONL, MT_EVAL_GLOBAL, PI_LLM_VOCAB,
                           write_json, write_jsonl)
from rhea.eval.checkers import InstructionSpec, UnknownInstructionError
from rhea.eval.suites import (TURN_KINDS, SuiteConfigError, SuiteTurn, UnknownSuiteError,
                              get_suite, list_suites)
from rhea.backends.llm import ScriptedGenerator
from rhea.eval.suites.builtin import ORDINARY_QUESTIONS


def run(episodes, reply_for):
    """Drive episodes like a runner would: reply, score with history, collect."""
    scores = []
    for episode in episodes:
        history = []
        for turn in episode.turns:
            reply = reply_for(turn)
            scores.append(episode.score_turn(turn, reply, history=history))
            history.append((turn.user, reply))
    return scores


def script(episodes):
    return [[(t.user, t.kind, t.expected, t.active_instructions) for t in e.turns]
            for e in episodes]


@pytest.mark.parametrize("name,kwargs", [
    ("instruction-retention", {"n_instructions": 2, "n_revoke": 1}),
    ("state-tracking", {}), ("state-tracking", {"mode": "babi"}),
    ("long-horizon", {}), ("efficiency", {}),
])
def test_generators_are_deterministic_in_the_seed(name, kwargs):
    suite = get_suite(name, n_episodes=2, **kwargs)
    first = suite.generate(n_turns=12, seed=5)
    assert script(first) == script(get_suite(name, n_episodes=2, **kwargs).generate(12, seed=5))
    assert script(first) != script(suite.generate(n_turns=12, seed=6))
    assert all(len(e.turns) == 12 for e in first)
    assert all(t.kind in TURN_KINDS and t.meta["index"] == i
               for e in first for i, t in enumerate(e.turns))
    assert first[0].episode_id != first[1].episode_id


def test_registry_and_errors():
    assert list_suites() == ["efficiency", "instruction-retention", "long-horizon",
                             "long-mt-bench-plus", "mt-eval-recollection", "multi-session-qa", "state-tracking"]
    with pytest.raises(UnknownSuiteError, match="'retention'.*instruction-retention"):
        get_suite("retention")
    with pytest.raises(SuiteConfigError, match="n_turns=1 must be an integer >= 4"):
        get_suite("instruction-retention", n_revoke=1).generate(n_turns=1)
    with pytest.raises(SuiteConfigError, match="n_revoke=3 must be <= n_instructions=1"):
        get_suite("instruction-retention", n_revoke=3)
    with pytest.raises(UnknownInstructionError):
        get_suite("instruction-retention", instructions=["no_commas"])
    with pytest.raises(SuiteConfigError, match="mode='dst'"):
        get_suite("state-tracking", mode="dst")
    with pytest.raises(SuiteConfigError, match="kind='chat'"):
        SuiteTurn("hi", "chat")


def test_builtin_queries_are_many_and_distinct():
    assert len(ORDINARY_QUESTIONS) >= 60 and len(set(ORDINARY_QUESTIONS)) == len(ORDINARY_QUESTIONS)


# ----------------------------------------------------------------- instruction-retention

def test_retention_scores_iar_by_turn_and_distance():
    suite = get_suite("instruction-retention", n_episodes=2, instructions=["no_comma"])
    episodes = suite.generate(n_turns=5, seed=0)
    assert episodes[0].turns[0].user == "From now on, do not use any commas in your responses."
    # Follow the rule for the first two queries, then forget it.
    scores = run(episodes, lambda t: "Yes, sure." if t.meta["index"] > 2 else "Yes sure.")
    result = suite.aggregate(scores)
    assert result["iar_by_distance"] == {1: 10.0, 2: 10.0, 3: 0.0, 4: 0.0}
    assert result["iar"] == 5.0 and result["iar_by_turn"][4] == 0.0
    assert result["iar_by_instruction"] == {"no_comma": 5.0}
    assert scores[0]["iar"] is None  # the instruction turn itself is not scored


def test_retention_revocation_is_tracked():
    suite = get_suite("instruction-retention", n_episodes=1, n_instructions=2, n_revoke=1,
                      instructions=["no_comma", "lowercase"], schedule="upfront")
    (episode,) = suite.generate(n_turns=6, seed=1)
    kinds = [t.kind for t in episode.turns]
    assert kinds == ["instruction", "query", "query", "revoke", "query", "query"]
    revoke = episode.turns[3]
    (revoked,) = revoke.meta["revoked"]
    assert revoke.user == revoked.revoke_phrase()
    assert revoked not in episode.turns[4].active_instructions
    assert len(episode.turns[4].active_instructions) == 1
    scores = run([episode], lambda t: "all lowercase and no comma.")
    result = suite.aggregate(scores)
    assert result["iar"] == 10.0
    assert result["revoked_still_followed"] == 1.0  # the model kept the revoked rule


def test_retention_from_mt_eval_pairs_only_allowed_instructions(tmp_path):
    path = write_jsonl(tmp_path / "global_inst.jsonl", MT_EVAL_GLOBAL)
    suite = get_suite("instruction-retention", path=str(path), n_episodes=3)
    allowed = {"startend:start_char": "start_letter", "punctuation:no_comma": "no_comma",
               "change_case:lowercase": "lowercase", "format:json_format": "json_format",
               "content:placeholder": "placeholder_count"}
    queries = {row["query"]: {allowed[i] for i in row["instructions"]} for row in MT_EVAL_GLOBAL}
    for episode in suite.generate(n_turns=4, seed=2):
        (spec,) = episode.turns[0].active_instructions
        for turn in episode.turns[1:]:
            assert spec.id in queries[turn.user]


def test_retention_from_ifeval_uses_its_parameters(tmp_path):
    path = write_jsonl(tmp_path / "input_data.jsonl", IFEVAL)
    suite = get_suite("instruction-retention", path=str(path), n_episodes=4)
    assert suite.data.unsupported == ("detectable_format:haiku",)
    pool = set(suite.data.instruction_pool)
    assert InstructionSpec("word_count", {"relation": "less than", "num_words": 50}) in pool
    assert not any(s.id == "repeat_prompt" for s in pool)  # task-bound, not global
    for episode in suite.generate(n_turns=3, seed=0):
        assert set(episode.turns[0].active_instructions) <= pool


def test_retention_from_mt_bench_uses_first_turns(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", MT_BENCH_JSONL)
    suite = get_suite("instruction-retention", path=str(path), n_episodes=1)
    first_turns = {q["turns"][0] for q in MT_BENCH_JSONL}
    assert all(t.user in first_turns for t in suite.generate(4, seed=0)[0].turns[1:])


def test_unknown_data_format_is_named(tmp_path):
    path = write_jsonl(tmp_path / "other.jsonl", [{"text": "hello"}])
    with pytest.raises(ValueError, match="not an MT-Bench, MT-Eval global_inst or IFEval"):
        get_suite("instruction-retention", path=str(path))


# ----------------------------------------------------------------------- state-tracking

def answer_all(turn, *, stale_key=None):
    if turn.kind != "probe":
        return "Noted."
    lines = []
    for key, value in turn.meta["answers"].items():
        if key == stale_key and turn.meta["previous"][key]:
            value = turn.meta["previous"][key][-1]
        lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def test_kv_stream_probe_and_jga():
    suite = get_suite("state-tracking", n_episodes=3, n_keys=3, filler_ratio=0.25)
    episodes = suite.generate(n_turns=16, seed=4)
    for episode in episodes:
        updates = [t for t in episode.turns if t.kind == "update"]
        probe = episode.turns[-1]
        assert probe.kind == "probe" and len(probe.meta["answers"]) == 3
        for key, value in probe.meta["answers"].items():  # the last update of each key wins
            assert [u.meta["value"] for u in updates if u.meta["key"] == key][-1] == value
        assert any(t.kind == "filler" for t in episode.turns)
    perfect = suite.aggregate(run(episodes, answer_all))
    assert (perfect["accuracy"], perfect["jga"], perfect["stale_rate"]) == (1.0, 1.0, 0.0)


def test_kv_updates_are_facts_not_global_instructions():
    """Rhea's instructional memory must not get the facts verbatim for free: no update reads as a rule."""
    from rhea.memory.recognizer import InstructionRecognizer

    recognize = InstructionRecognizer()
    (episode,) = get_suite("state-tracking", n_episodes=1, n_keys=4).generate(n_turns=12, seed=0)
    updates = [t for t in episode.turns if t.kind == "update"]
    assert updates and not any(recognize(t.user).is_global for t in updates)
    # the probe asks about the conversation, not the world ("the current value of metal" is a price)
    assert "what I told you earlier in this conversation" in episode.turns[-1].user


def test_kv_stale_answer_is_wrong_and_counted():
    suite = get_suite("state-tracking", n_episodes=1, n_keys=2, filler_ratio=0.0)
    (episode,) = suite.generate(n_turns=9, seed=0)
    probe = episode.turns[-1]
    stale_key = next(k for k, old in probe.meta["previous"].items() if old)
    score = episode.score_turn(probe, answer_all(probe, stale_key=stale_key))
    assert score["correct"][stale_key] is False and score["stale"][stale_key] is True
    assert score["joint"] is False and score["accuracy"] == 0.5
    hedge = "\n".join(f"{k}: {v} or {probe.meta['candidates'][k][0]}"
                      for k, v in probe.meta["answers"].items())
    assert episode.score_turn(probe, hedge)["accuracy"] < 1.0


def test_kv_from_pi_llm_vocabulary(tmp_path):
    path = write_json(tmp_path / "dict_category_double-word_46-400_v1-1.json", PI_LLM_VOCAB)
    suite = get_suite("state-tracking", path=str(path), n_keys=3, n_episodes=1)
    (episode,) = suite.generate(n_turns=8, seed=1)
    assert set(episode.meta["keys"]) == set(PI_LLM_VOCAB)
    probe = episode.turns[-1]
    assert all(v in PI_LLM_VOCAB[k] for k, v in probe.meta["answers"].items())
    assert suite.aggregate(run([episode], answer_all))["jga"] == 1.0
    with pytest.raises(SuiteConfigError, match="n_keys=5 exceeds the 3 categories"):
        get_suite("state-tracking", path=str(path), n_keys=5)


def test_babi_file_questions_become_probes(tmp_path):
    path = tmp_path / "qa1_single-supporting-fact_test.txt"
    path.write_text(BABI_QA1)
    suite = get_suite("state-tracking", path=str(path), n_episodes=4)
    episodes = suite.generate(n_turns=12, seed=3)
    for episode in episodes:
        probes = [t for t in episode.turns if t.kind == "probe"]
        assert probes and episode.turns[-1].kind == "probe"
        assert all(p.user.startswith("Where is") for p in probes)
        assert len(episode.turns) == 12
    right = suite.aggregate(run(episodes, lambda t: f"In the {t.expected}." if t.expected
                                else "Okay."))
    assert right["accuracy"] == 1.0 and right["episode_jga"] == 1.0
    wrong = suite.aggregate(run(episodes, lambda t: "The kitchen." if t.expected else "Okay."))
    assert wrong["accuracy"] == 0.0


def test_babi_builtin_simulation_probes_every_person():
    suite = get_suite("state-tracking", mode="babi", n_keys=3, n_episodes=1)
    (episode,) = suite.generate(n_turns=10, seed=2)
    probe = episode.turns[-1]
    assert set(probe.meta["answers"]) == set(episode.meta["keys"])
    for person, place in probe.meta["answers"].items():
        moves = [t.user for t in episode.turns if t.kind == "update" and t.user.startswith(person)]
        assert moves[-1].endswith(f"the {place}.")


# ------------------------------------------------------------------------- long-horizon

def test_long_horizon_plants_and_recalls_without_judge(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", MT_BENCH_JSONL)
    suite = get_suite("long-horizon", path=str(path), n_facts=2, n_episodes=2)
    episodes = suite.generate(n_turns=8, seed=0)
    for episode in episodes:
        kinds = [t.kind for t in episode.turns]
        assert kinds[:2] == ["update", "update"] and kinds[-2:] == ["probe", "probe"]
        queries = [t for t in episode.turns if t.kind == "query"]
        # Both turns of an MT-Bench question stay next to each other.
        assert all(b.meta["turn_number"] == 2 and a.meta["question_id"] == b.meta["question_id"]
                   for a, b in zip(queries[::2], queries[1::2]))
    result = suite.aggregate(run(episodes, lambda t: t.expected or "I am not sure."))
    assert result["judge"] == "skipped" and result["judge_mean"] is None
    assert result["recall_accuracy"] == 1.0
    forgot = suite.aggregate(run(episodes, lambda t: "I do not remember."))
    assert forgot["recall_accuracy"] == 0.0


def test_long_horizon_with_scripted_judge_uses_history_for_second_turns():
    questions = [q for q in get_suite("long-horizon").data if q.category == "math"][:1]
    judge = ScriptedGenerator(["[[8]]", "[[6]]", "no rating"])
    suite = get_suite("long-horizon", data=questions, judge=judge, n_facts=0, n_episodes=1)
    (episode,) = suite.generate(n_turns=3, seed=0)
    scores = run([episode], lambda t: f"The answer is {t.expected}.")
    prompts = [call[-1]["content"] for call in judge.calls]
    assert "[The Start of Reference Answer]" in prompts[0]  # math: graded against reference
    assert "### Assistant A:\nThe answer is 90." in prompts[1]  # first answer from history
    assert [s["judge_prompt"] for s in scores] == ["single-math-v1",
                                                   "single-math-v1-multi-turn", "single-math-v1"]
    result = suite.aggregate(scores)
    assert result["judge"] == "ok" and result["judge_mean"] == 7.0
    assert result["judge_errors"] == 1 and result["judge_by_turn_number"] == {1: 8.0, 2: 6.0}
    assert result["rule_accuracy"] == 1.0


# --------------------------------------------------------------------------- efficiency

def test_efficiency_sixty_turns_and_runner_extras():
    suite = get_suite("efficiency")
    (episode,) = suite.generate(seed=0)
    assert len(episode.turns) == 60 and len({t.user for t in episode.turns}) == 60
    scores = run([episode], lambda t: "word " * 10)
    for i, score in enumerate(scores):
        score["latency_s"] = 0.1 * (i + 1)  # what a runner would add
    result = suite.aggregate(scores)
    assert result["reply_words"]["mean"] == 10.0 and result["reply_words"]["total"] == 600.0
    assert result["recorded"]["latency_s"]["count"] == 60
    assert result["recorded"]["latency_s"]["p50"] == pytest.approx(3.05)


def test_efficiency_from_mt_bench_file(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", MT_BENCH_JSONL)
    suite = get_suite("efficiency", path=str(path))
    assert len(suite.data) == 6
    (episode,) = suite.generate(n_turns=7, seed=0)
    assert {t.user for t in episode.turns} == set(suite.data)


@pytest.mark.parametrize("name", ["instruction-retention", "state-tracking", "long-horizon",
                                  "efficiency"])
def test_episodes_serialise_to_json(name):
    import json

    kwargs = {"n_instructions": 2, "n_revoke": 1} if name == "instruction-retention" else {}
    (episode,) = get_suite(name, n_episodes=1, **kwargs).generate(n_turns=8, seed=0)
    data = json.loads(json.dumps(episode.to_dict()))
    assert data["suite"] == name and len(data["turns"]) == 8
    assert [t["user"] for t in data["turns"]] == [t.user for t in episode.turns]


def test_probe_lines_tolerate_prose_and_markdown():
    suite = get_suite("state-tracking", n_episodes=1, n_keys=2, filler_ratio=0.0)
    (episode,) = suite.generate(n_turns=5, seed=0)
    probe = episode.turns[-1]
    reply = "\n".join(f"* The current **{k}** is {v}." for k, v in probe.meta["answers"].items())
    assert episode.score_turn(probe, reply)["joint"] is True
    assert episode.score_turn(probe, "I don't know.")["accuracy"] == 0.0
