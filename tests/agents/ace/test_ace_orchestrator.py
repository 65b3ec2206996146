"""The retrieve-or-think loop with scripted agents: memory updates, votes, tokens, baselines."""
import pytest

from rhea.agents.ace import ACE, AceConfigError, BM25Passages, IterativeRetrieval, answer_with_all_passages
from rhea.backends.llm import ScriptedGenerator

CORPUS = ["Mary got the milk there.", "John moved to the bedroom.", "Mary travelled to the hallway.",
          "Sandra went back to the kitchen.", "Daniel went to the office."]


class Recording(ScriptedGenerator):
    """A scripted generator that also records the temperature of each call and counts tokens."""

    def __init__(self, replies):
        super().__init__(replies)
        self.temperatures, self.prompt_tokens, self.completion_tokens = [], 0, 0

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None):
        self.temperatures.append(temperature)
        self.prompt_tokens += 100
        self.completion_tokens += 3
        return super().generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)


def test_scripted_end_to_end_retrieve_think_retrieve():
    llm = Recording([
        "RETRIEVE", "THINK", "RETRIEVE",             # round 1: 2-1 RETRIEVE; query = question (memory empty)
        "THINK", "think", "no idea",                 # round 2: THINK (one abstention)
        "Who had the milk?", "Mary had the milk.",   # sub-question and its answer
        "RETRIEVE", "THINK", "maybe",                # round 3: tie -> RETRIEVE
        "Query: Mary travelled",                     # formulated query
        "hallway",                                   # final answer
    ])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=3, rounds=3, passages_per_retrieval=1).answer("Where is the milk?")
    r1, r2, r3 = ans.trace.rounds
    assert ans.text == "hallway" and ans.trace.actions == ["RETRIEVE", "THINK", "RETRIEVE"]
    assert r1.query == "Where is the milk?" and r1.retrieved[0][0] == 0
    assert (r2.sub_question, r2.thought, r2.tally.abstained) == ("Who had the milk?", "Mary had the milk.", 1)
    assert r3.tally.tie and r3.query == "Mary travelled" and r3.retrieved[0][0] == 2
    assert [e.kind for e in ans.memory.entries] == ["passage", "thought", "passage"]
    assert [r.memory_size for r in ans.trace.rounds] == [1, 2, 3]
    # votes sampled with temperature, every other step greedy
    assert llm.temperatures[:3] == [0.7] * 3 and llm.temperatures[6:8] == [0.0, 0.0] and llm.temperatures[-1] == 0.0
    # tokens come from the generator's counters, split by role and round
    assert ans.trace.counter == "generator"
    assert r1.tokens.prompt == {"voting": 300, "query": 0, "thinking": 0, "answering": 0}
    assert r2.tokens.prompt["thinking"] == 200 and r3.tokens.prompt["query"] == 100
    assert ans.trace.tokens.total == 13 * 103 and ans.trace.think_share == pytest.approx(2 / 13)


def test_retrieve_never_adds_a_passage_twice():
    llm = ScriptedGenerator(["RETRIEVE", "RETRIEVE", "Mary", "RETRIEVE", "Mary", "x"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=3, passages_per_retrieval=1).answer("Where is Mary?")
    assert sorted(ans.memory.passage_indices) == [0, 2] and len(set(ans.memory.passage_indices)) == 2
    assert "no new passage matched the query" in ans.trace.rounds[2].notes


def test_empty_think_replies_are_recorded_not_stored():
    llm = ScriptedGenerator(["THINK", "", "", "dunno"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=1).answer("Where is Mary?")
    assert len(ans.memory) == 0 and ans.trace.rounds[0].sub_question == "Where is Mary?"
    assert ans.trace.rounds[0].notes == ["empty sub-question reply; thought about the question itself",
                                         "empty thought; memory unchanged"]


def test_n1_ace_that_votes_retrieve_equals_single_step_rag():
    ace_llm, rag_llm = ScriptedGenerator(["RETRIEVE", "RETRIEVE", "milk answer"]), ScriptedGenerator(["milk answer"])
    ace = ACE(ace_llm, BM25Passages(CORPUS), n_agents=2, rounds=1, passages_per_retrieval=2).answer("Where is the milk?")
    rag = IterativeRetrieval(rag_llm, BM25Passages(CORPUS), rounds=1, passages_per_retrieval=2).answer("Where is the milk?")
    assert ace.memory.to_dict() == rag.memory.to_dict() and ace.text == rag.text
    assert ace_llm.calls[-1] == rag_llm.calls[-1]  # identical answer prompt
    assert rag.trace.rounds[0].votes == [] and rag.trace.rounds[0].tally is None


def test_iterative_retrieval_formulates_a_query_each_later_round():
    llm = ScriptedGenerator(["Mary travelled", "office", "ans"])
    out = IterativeRetrieval(llm, BM25Passages(CORPUS), rounds=3, passages_per_retrieval=1).answer("Where is the milk?")
    assert out.trace.actions == ["RETRIEVE"] * 3 and [r.query for r in out.trace.rounds][1:] == ["Mary travelled", "office"]


def test_memory_query_mode_expands_the_question_without_a_call():
    llm = ScriptedGenerator(["RETRIEVE", "RETRIEVE", "hallway"])
    out = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=2, passages_per_retrieval=1, query_mode="memory").answer(
        "Where is the milk?")
    assert out.trace.rounds[1].query == "Where is the milk? Mary got the milk there."
    assert out.trace.rounds[1].tokens.prompt["query"] == 0 and out.trace.counter == "regex-approx"


def test_answers_by_round_match_separate_runs():
    script = ["RETRIEVE", "THINK", "who?", "Mary.", "RETRIEVE", "Mary"]
    answers = ["a1", "a2", "a3"]
    llm = ScriptedGenerator(script + answers)
    by_round = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=3, passages_per_retrieval=1).answers_by_round("Where is the milk?")
    assert [a.text for a in by_round] == answers
    for n, got in enumerate(by_round, start=1):
        single_script = {1: script[:1], 2: script[:4], 3: script}[n]
        single = ACE(ScriptedGenerator(single_script + [answers[n - 1]]), BM25Passages(CORPUS), n_agents=1, rounds=n,
                     passages_per_retrieval=1).answer("Where is the milk?")
        assert single.memory.to_dict() == got.memory.to_dict() and single.trace.actions == got.trace.actions
        assert single.trace.tokens.to_dict() == got.trace.tokens.to_dict()


def test_vanilla_sees_every_passage():
    llm = ScriptedGenerator(["hallway"])
    out = answer_with_all_passages(llm, CORPUS, "Where is the milk?")
    assert out.text == "hallway" and all(p in llm.calls[0][-1]["content"] for p in CORPUS)
    assert out.trace.tokens.prompt["answering"] > 0 and out.trace.rounds == []


@pytest.mark.parametrize("kwargs, match", [
    ({"n_agents": 0}, "n_agents=0"), ({"rounds": -1}, "rounds=-1"), ({"vote_temperature": -0.1}, "vote_temperature"),
    ({"tie_break": "coin"}, "tie_break='coin'"), ({"vote_mode": "logits"}, "vote_mode='logits'"),
    ({"vote_mode": "constrained"}, "needs a local rhea.backends.llm.HFGenerator"), ({"query_mode": "x"}, "query_mode='x'"),
])
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises((AceConfigError, ValueError), match=match):
        ACE(ScriptedGenerator([]), BM25Passages(CORPUS), **kwargs)


def test_bad_llm_and_retriever_are_named():
    with pytest.raises(ValueError, match="TextGenerator"):
        ACE(object(), BM25Passages(CORPUS))
    with pytest.raises(AceConfigError, match="search"):
        ACE(ScriptedGenerator([]), ["not a retriever"])
