"""Evaluation design: non-answers fail every rule, strict vs loose readings, instructions given
and revoked at varied turns, distance counted from each instruction, per-rule pass rates."""
import pytest

from rhea.eval.checkers import InstructionSpec
from rhea.eval.checkers.answer import check_loose, check_strict, judge_reply, non_answer
from rhea.eval.suites import SuiteConfigError, get_suite

from .test_eval_suites import run


@pytest.mark.parametrize("reply, reason", [
    ("", "empty"), ("  ...  \n", "empty"), ("**", "empty"),
    ("How do I write a good cover letter?", "echo"),
    ("how do I write a good cover letter", "echo"),
    ("Sure. How do I write a good cover letter?", "echo"),
    ("yes yes yes yes yes yes yes yes yes", "repetition"),
    ("I think so. " * 8, "repetition"),
    ("Start with a short story about why you want the job.", None),
    ("Letter.", None),
    ("Why does a cover letter matter?", "question"),
    ("**What is the purpose of a camera?**", "question"),
    ("Is it for a job? Then start with why you want it.", None),
])
def test_non_answer_reasons(reply, reason):
    assert non_answer(reply, "How do I write a good cover letter?") == reason


def test_a_non_answer_fails_even_the_free_rules():
    free = [InstructionSpec("exclude_keywords", {"forbidden_words": ["thing", "stuff"]}),
            InstructionSpec("no_comma"), InstructionSpec("letter_frequency",
                                                         {"letter": "z", "let_relation": "less than",
                                                          "let_frequency": 2})]
    assert all(s.check("") for s in free)  # IFEval's checks pass an empty reply
    judged = judge_reply(free, "", "Why did the Titanic sink?")
    assert judged["non_answer"] == "empty"
    assert not any(judged["strict"].values()) and not any(judged["loose"].values())
    echoed = judge_reply(free, "Why did the Titanic sink?", "Why did the Titanic sink?")
    assert echoed["non_answer"] == "echo" and not any(echoed["strict"].values())
    real = judge_reply(free, "It hit an iceberg and flooded.", "Why did the Titanic sink?")
    assert real["non_answer"] is None and all(real["strict"].values())


def test_options_rule_strict_is_the_whole_reply_loose_is_ifeval():
    spec = InstructionSpec("constrained_response")
    long = "My answer is yes. Writing a good cover letter requires balance between clarity."
    assert spec.check(long)  # IFEval: contains an option
    assert not check_strict(spec, long) and check_loose(spec, long)
    for exact in ("My answer is no.", "  **My answer is maybe.**\n", '"My answer is yes."'):
        assert check_strict(spec, exact)
    assert not check_loose(spec, "Maybe.")


def test_loose_reading_drops_a_first_line_and_asterisks():
    start = InstructionSpec("start_word", {"word": "Indeed"})
    reply = "Sure, here it is:\nIndeed, the answer is four."
    assert not check_strict(start, reply) and check_loose(start, reply)
    lower = InstructionSpec("lowercase")
    assert not check_strict(lower, "**Note**\nall lowercase here") and check_loose(
        lower, "**Note**\nall lowercase here")


def test_staggered_schedule_varies_given_and_revoked_turns():
    suite = get_suite("instruction-retention", n_episodes=8, n_instructions=3, n_revoke=1)
    episodes = suite.generate(n_turns=20, seed=0)
    given = {tuple(sorted(e.meta["given_at"].values())) for e in episodes}
    revoked = {tuple(e.meta["revoked_at"].values()) for e in episodes}
    assert len(given) > 2 and len(revoked) > 2
    for episode in episodes:
        given_at = episode.meta["given_at"]
        assert 0 in given_at.values()
        for turn in episode.turns:
            if turn.kind == "query":  # distance counts from each instruction's own turn
                assert turn.meta["distance"] == {s.key: turn.meta["index"] - given_at[s.key]
                                                 for s in turn.active_instructions}
        for key, at in episode.meta["revoked_at"].items():
            assert at >= given_at[key] + 2 and at < len(episode.turns) - 1
            revoke = episode.turns[at]
            assert revoke.kind == "revoke" and revoke.meta["revoked"][0].key == key
            assert all(key not in {s.key for s in t.active_instructions}
                       for t in episode.turns[at:])
    # distance is not the turn index: some query has an instruction given after turn 0
    assert any(d < t.meta["index"] for e in episodes for t in e.turns if t.kind == "query"
               for d in t.meta["distance"].values())


def test_staggered_needs_room_to_revoke():
    suite = get_suite("instruction-retention", n_episodes=1, n_instructions=1, n_revoke=1)
    assert [t.kind for t in suite.generate(n_turns=4, seed=0)[0].turns] == [
        "instruction", "query", "revoke", "query"]
    with pytest.raises(SuiteConfigError, match="schedule='later'"):
        get_suite("instruction-retention", schedule="later")


def test_per_rule_pass_rates_strict_loose_and_non_answers_are_reported():
    suite = get_suite("instruction-retention", n_episodes=2, n_instructions=2, n_revoke=0,
                      instructions=["exclude_keywords", "constrained_response"], schedule="upfront")
    episodes = suite.generate(n_turns=6, seed=1)

    def reply(turn):
        if turn.kind != "query":
            return "OK."
        return "" if turn.meta["index"] == 5 else "My answer is yes. Because it is"

    result = suite.aggregate(run(episodes, reply))
    assert result["non_answers"] == 2 and result["non_answers_by_reason"] == {"empty": 2}
    n_queries = sum(t.kind == "query" for e in episodes for t in e.turns)
    assert result["non_answer_rate"] == pytest.approx(2 / n_queries)
    rate = 10.0 * (n_queries - 2) / n_queries
    assert result["iar_by_instruction"]["exclude_keywords"] == pytest.approx(rate)
    assert result["iar_by_instruction"]["constrained_response"] == 0.0  # strict: not the whole reply
    assert result["iar_loose_by_instruction"]["constrained_response"] == pytest.approx(rate)
    assert result["iar_loose"] > result["iar"]
    assert sum(result["checks_by_instruction"].values()) == sum(
        len(t.active_instructions) for e in episodes for t in e.turns if t.kind == "query")


def test_suites_default_to_eight_episodes():
    for name in ("instruction-retention", "state-tracking", "long-horizon"):
        assert get_suite(name).n_episodes >= 8


# ----------------------------------------------------------------------- state-tracking

from rhea.eval.suites.state_tracking import exact_match, extract_values  # noqa: E402


def test_one_line_cannot_answer_every_key():
    """The committed Qwen sculptor reply: metal was read as '100, ..., tool: gold.' (right by
    accident, since 'gold' is a metal); now each key gets only its own segment."""
    reply = "metal: 100, instrument: sitar, city: Perth, tool: gold."
    keys = ["metal", "instrument", "city", "tool"]
    assert extract_values(reply, keys) == {"metal": "100", "instrument": "sitar",
                                           "city": "Perth", "tool": "gold"}
    suite = get_suite("state-tracking", n_episodes=1, n_keys=4, n_probes=1)
    (episode,) = suite.generate(n_turns=8, seed=0)
    probe = episode.turns[-1]
    keys = list(probe.meta["answers"])
    values = list(probe.meta["answers"].values())
    # every value on one line, but shifted by one key: nothing is right
    shifted = ", ".join(f"{k}: {values[(i + 1) % len(values)]}" for i, k in enumerate(keys))
    assert episode.score_turn(probe, shifted)["accuracy"] == 0.0
    right = ", ".join(f"{k}: {v}" for k, v in zip(keys, values)) + "."
    score = episode.score_turn(probe, right)
    assert score["accuracy"] == 1.0 and score["exact"] is True


def test_exact_match_is_stricter_than_naming():
    assert exact_match("Perth.", "Perth") and exact_match("the kitchen", "kitchen")
    assert not exact_match("Perth, I think", "Perth") and not exact_match(None, "Perth")


def test_several_probes_ask_what_the_user_said_so_far():
    from rhea.memory.recognizer import InstructionRecognizer

    suite = get_suite("state-tracking", n_episodes=4, n_keys=3, n_probes=3)
    episodes = suite.generate(n_turns=16, seed=2)
    recognize = InstructionRecognizer()
    for episode in episodes:
        probes = [t for t in episode.turns if t.kind == "probe"]
        assert len(probes) == 3 and episode.turns[-1].kind == "probe"
        assert [p.meta["final"] for p in probes] == [False, False, True]
        assert len(episode.turns) == 16
        seen: dict[str, str] = {}
        for turn in episode.turns:  # each probe asks for the last value the user gave each key
            if turn.kind == "update":
                seen[turn.meta["key"]] = turn.meta["value"]
            elif turn.kind == "probe":
                assert turn.meta["answers"] == {k: seen[k] for k in turn.meta["answers"]}
                assert set(turn.meta["answers"]) == set(seen)
                assert "what did I last tell you" in turn.user
                assert not recognize(turn.user).is_global
    perfect = suite.aggregate(run(episodes, _answer_all))
    assert perfect["n_probes"] == 12
    assert (perfect["accuracy"], perfect["jga"], perfect["probe_jga"]) == (1.0, 1.0, 1.0)
    assert perfect["accuracy_by_turns_since_update"]


def _answer_all(turn):
    if turn.kind != "probe":
        return "Noted."
    return "\n".join(f"{k}: {v}" for k, v in turn.meta["answers"].items())


def test_jga_is_the_final_probe_exact_per_episode():
    suite = get_suite("state-tracking", n_episodes=4, n_keys=2, n_probes=2, filler_ratio=0.0)
    episodes = suite.generate(n_turns=8, seed=3)

    def hedge_last(turn):  # right at the early probe, every key right but not exact at the end
        if turn.kind == "probe" and turn.meta["final"]:
            return "\n".join(f"{k}: {v}, I believe" for k, v in turn.meta["answers"].items())
        return _answer_all(turn)

    result = suite.aggregate(run(episodes, hedge_last))
    assert result["accuracy"] == 1.0 and result["probe_jga"] == 1.0
    assert result["jga"] == 0.0
