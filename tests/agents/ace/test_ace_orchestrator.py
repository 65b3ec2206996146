"""The retrieve-or-think loop with scripted agents: memory updates, votes, tokens, baselines."""
import pytest

from rhea.agents.ace import (ACE, AceConfigError, BM25Passages, IterativeRetrieval, answer_with_all_passages,
                             answer_without_retrieval)
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
        # round 1: RETRIEVE without a vote; query = the question (M_0 = {Q})
        "THINK", "think", "no idea",                 # round 2: THINK (one abstention)
        "Who had the milk?", "Mary had the milk.",   # sub-query and its internal answer
        "RETRIEVE", "THINK", "maybe",                # round 3: tie -> RETRIEVE
        "Query: Mary travelled",                     # formulated query
        "hallway",                                   # final answer
    ])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=3, rounds=3, passages_per_retrieval=1).answer("Where is the milk?")
    r1, r2, r3 = ans.trace.rounds
    assert ans.text == "hallway" and ans.trace.actions == ["RETRIEVE", "THINK", "RETRIEVE"]
    assert r1.votes == [] and r1.tally is None and "round 1: RETRIEVE without a vote" in r1.notes[0]
    assert r1.query == "Where is the milk?" and r1.retrieved[0][0] == 0
    assert (r2.sub_question, r2.thought, r2.tally.abstained) == ("Who had the milk?", "Mary had the milk.", 1)
    assert r3.tally.tie and r3.query == "Mary travelled" and r3.retrieved[0][0] == 2
    assert [e.kind for e in ans.memory.entries] == ["passage", "thought", "passage"]
    assert [r.memory_size for r in ans.trace.rounds] == [1, 2, 3]
    # votes sampled with temperature, every other step greedy
    assert llm.temperatures == [0.7] * 3 + [0.0] * 2 + [0.7] * 3 + [0.0] * 2
    # tokens come from the generator's counters, split by role and round; round 1 costs nothing
    assert ans.trace.counter == "generator"
    assert r1.tokens.total == 0 and r2.tokens.prompt["voting"] == 300
    assert r2.tokens.prompt["thinking"] == 200 and r3.tokens.prompt["query"] == 100
    assert ans.trace.tokens.total == 10 * 103
    # the paper's Think %: a share of actions; the token share is kept under its own name
    assert ans.trace.think_share == pytest.approx(1 / 3) and ans.trace.think_token_share == pytest.approx(2 / 10)
    assert ans.trace.to_dict()["think_share"] == pytest.approx(1 / 3)


def test_decision_prompt_is_the_papers_word_for_word():
    llm = ScriptedGenerator(["RETRIEVE", "milk", "ans"])
    ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=2, passages_per_retrieval=1).answer("Where is the milk?")
    (vote_prompt,) = llm.calls[0]
    assert vote_prompt["role"] == "user" and vote_prompt["content"] == (
        "You are an expert question-answering system. Based on the original question Where is the milk?, the current "
        "context, and the sub-queries Where is the milk?\n[0] Mary got the milk there., decide whether to: (1) THINK: "
        "continue asking one sub-query which is needed to answer the question; (2) RETRIEVE: retrieve more external "
        "documents from the context to gain more information.")


def test_think_answers_the_sub_query_internally_not_only_from_the_passages():
    llm = ScriptedGenerator(["THINK", "Who is Mary?", "A girl in the story.", "hallway"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=2, passages_per_retrieval=1).answer("Where is the milk?")
    sub_q, sub_a = llm.calls[1], llm.calls[2]
    assert "sub-query which is needed to answer the question" in sub_q[0]["content"]
    assert "what you know" in sub_a[0]["content"] and "Sub-query: Who is Mary?" in sub_a[-1]["content"]
    assert ans.memory.thoughts[0].sub_question == "Who is Mary?" and ans.memory.passage_indices == [0]


def test_round_one_can_be_voted_as_an_ablation():
    llm = ScriptedGenerator(["THINK", "Who?", "Mary.", "x"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=1, force_first_retrieve=False).answer("Where is Mary?")
    assert ans.trace.actions == ["THINK"] and ans.trace.rounds[0].tally.counts["THINK"] == 1
    assert ans.trace.think_share == 1.0


def test_retrieve_never_adds_a_passage_twice():
    llm = ScriptedGenerator(["RETRIEVE", "Mary", "RETRIEVE", "Mary", "x"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=3, passages_per_retrieval=1).answer("Where is Mary?")
    assert sorted(ans.memory.passage_indices) == [0, 2] and len(set(ans.memory.passage_indices)) == 2
    assert "no new passage matched the query" in ans.trace.rounds[2].notes


def test_empty_think_replies_are_recorded_not_stored():
    llm = ScriptedGenerator(["THINK", "", "", "dunno"])
    ans = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=2, passages_per_retrieval=1).answer("Where is Mary?")
    assert len(ans.memory) == 1 and ans.trace.rounds[1].sub_question == "Where is Mary?"
    assert ans.trace.rounds[1].notes == ["empty sub-question reply; thought about the question itself",
                                         "empty thought; memory unchanged"]


def test_n1_ace_equals_single_step_rag():
    ace_llm, rag_llm = ScriptedGenerator(["milk answer"]), ScriptedGenerator(["milk answer"])
    ace = ACE(ace_llm, BM25Passages(CORPUS), n_agents=5, rounds=1, passages_per_retrieval=2).answer("Where is the milk?")
    rag = IterativeRetrieval(rag_llm, BM25Passages(CORPUS), rounds=1, passages_per_retrieval=2).answer("Where is the milk?")
    assert ace.memory.to_dict() == rag.memory.to_dict() and ace.text == rag.text
    assert ace_llm.calls == rag_llm.calls and len(ace_llm.calls) == 1  # no vote: one identical answer call
    assert ace.trace.tokens.to_dict() == rag.trace.tokens.to_dict() and ace.trace.think_share == 0.0
    assert rag.trace.rounds[0].votes == [] and rag.trace.rounds[0].tally is None


def test_iterative_retrieval_formulates_a_query_each_later_round():
    llm = ScriptedGenerator(["Mary travelled", "office", "ans"])
    out = IterativeRetrieval(llm, BM25Passages(CORPUS), rounds=3, passages_per_retrieval=1).answer("Where is the milk?")
    assert out.trace.actions == ["RETRIEVE"] * 3 and [r.query for r in out.trace.rounds][1:] == ["Mary travelled", "office"]


def test_memory_query_mode_expands_the_question_without_a_call():
    llm = ScriptedGenerator(["RETRIEVE", "hallway"])
    out = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=2, passages_per_retrieval=1, query_mode="memory").answer(
        "Where is the milk?")
    assert out.trace.rounds[1].query == "Where is the milk? Mary got the milk there."
    assert out.trace.rounds[1].tokens.prompt["query"] == 0 and out.trace.counter == "regex-approx"


def test_answers_by_round_match_separate_runs():
    script = ["THINK", "who?", "Mary.", "RETRIEVE", "Mary"]
    answers = ["a1", "a2", "a3"]
    llm = ScriptedGenerator(script + answers)
    by_round = ACE(llm, BM25Passages(CORPUS), n_agents=1, rounds=3, passages_per_retrieval=1).answers_by_round("Where is the milk?")
    assert [a.text for a in by_round] == answers
    for n, got in enumerate(by_round, start=1):
        single_script = {1: [], 2: script[:3], 3: script}[n]
        single = ACE(ScriptedGenerator(single_script + [answers[n - 1]]), BM25Passages(CORPUS), n_agents=1, rounds=n,
                     passages_per_retrieval=1).answer("Where is the milk?")
        assert single.memory.to_dict() == got.memory.to_dict() and single.trace.actions == got.trace.actions
        assert single.trace.tokens.to_dict() == got.trace.tokens.to_dict()
        assert single.trace.think_share == got.trace.think_share


def test_vanilla_uses_no_retrieval():
    llm = ScriptedGenerator(["Paris"])
    out = answer_without_retrieval(llm, "Where is the milk?")
    assert out.text == "Paris" and len(out.memory) == 0 and out.trace.rounds == []
    assert not any(p in llm.calls[0][-1]["content"] for p in CORPUS) and "Facts:\n(none)" in llm.calls[0][-1]["content"]
    assert out.trace.tokens.prompt["answering"] > 0


def test_all_passages_baseline_sees_every_passage():
    llm = ScriptedGenerator(["hallway"])
    out = answer_with_all_passages(llm, CORPUS, "Where is the milk?")
    assert out.text == "hallway" and all(p in llm.calls[0][-1]["content"] for p in CORPUS)
    assert out.trace.tokens.prompt["answering"] > 0 and out.trace.rounds == []


@pytest.mark.parametrize("kwargs, match", [
    ({"n_agents": 0}, "n_agents=0"), ({"rounds": -1}, "rounds=-1"), ({"vote_temperature": -0.1}, "vote_temperature"),
    ({"tie_break": "coin"}, "tie_break='coin'"), ({"vote_mode": "logits"}, "vote_mode='logits'"),
    ({"vote_mode": "constrained"}, "needs a local rhea.backends.llm.HFGenerator"), ({"query_mode": "x"}, "query_mode='x'"),
    ({"force_first_retrieve": "yes"}, "force_first_retrieve='yes'"),
])
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises((AceConfigError, ValueError), match=match):
        ACE(ScriptedGenerator([]), BM25Passages(CORPUS), **kwargs)


def test_bad_llm_and_retriever_are_named():
    with pytest.raises(ValueError, match="TextGenerator"):
        ACE(object(), BM25Passages(CORPUS))
    with pytest.raises(AceConfigError, match="search"):
        ACE(ScriptedGenerator([]), ["not a retriever"])
