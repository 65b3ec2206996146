"""Every agent's inner model calls fit the window of the generator they call (`fit_inner`)."""
import json
import random

from rhea.agents.ace.policy import AcePolicy
from rhea.agents.acr.history import HistoryTurn
from rhea.agents.acr.router import Router
from rhea.agents.context_agent.policy import ContextAgent
from rhea.agents.sculptor.policy import SculptorPolicy
from rhea.backends.embedding import HashingEmbedder
from rhea.context import Conversation, Turn
from rhea.context.budget import prompt_room_of
from rhea.testing import _WORDS, WindowedGenerator, tiny_rhea, tiny_tokenizer

SEARCH = '<tool_call>{"name": "search_context", "arguments": {"query": "number"}}</tool_call>'


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def long_conversation(n: int = 200) -> Conversation:
    return Conversation([Turn(f"turn {i} . " + words(200, i), words(400, 1000 + i)) for i in range(n)])


def inner(records, call_prefix: str = "") -> list[dict]:
    return [r for r in records if r.get("event") == "inner_budget" and r["call"].startswith(call_prefix)]


def test_sculptor_loop_prompts_fit_on_a_200_turn_history_keeping_query_and_trail():
    gen = WindowedGenerator([SEARCH, SEARCH, "the number is 4 ."], window=2048)
    policy = SculptorPolicy(gen, max_tool_calls=2, tokenizer=tiny_tokenizer())
    plan = policy.build(long_conversation(), "what is the number ?")
    steps = policy.last_result.steps
    assert gen.calls == len(steps) == 3 and 0 < gen.longest <= 2048
    for step in steps:
        assert len(step.sources) == len(step.prompt)
        assert any(m["role"] == "user" and m["content"] == "what is the number ?" for m in step.prompt)
        assert step.prompt[0]["role"] == "system"
    # the trail (the model's calls, the tool results) stays after the query, its sources kept
    last = steps[-1]
    assert [s for s in last.sources if s is not None] == [0, 1]
    recs = inner(plan.decisions.records, "sculptor.loop")
    assert len(recs) == 3 and all(r["tokens_after"] <= r["room"] == 2048 - 256 for r in recs)
    assert recs[0]["dropped"] > 300 and recs[0]["dropped_messages"][0] == 1  # the oldest history went first


def test_sculptor_fragment_summaries_fit_the_summarizer_window():
    summarizer = WindowedGenerator(["a short summary ."], window=256)
    policy = SculptorPolicy(WindowedGenerator(["done ."], window=8192), summarizer=summarizer,
                            summary_max_new_tokens=32)
    policy.build(Conversation([Turn("<doc> " + words(900, 5) + " </doc> keep it", "ok")]), "what now ?")
    box = policy._loop().toolbox
    made = json.loads(box.call("fragment_context", {"start_marker": "<doc>", "end_marker": "</doc>",
                                                    "num_fragments": 1}))
    frag = made["fragments"][0]["fragment_id"]
    out = json.loads(box.call("summarize_fragment", {"fragment_id": frag, "focus": "numbers"}))
    assert out["status"] == "summarized" and summarizer.calls == 1
    (rec,) = box.budget_records
    assert rec["call"] == "sculptor.summary" and rec["tokens_after"] <= rec["room"] == 224


def test_ace_votes_queries_and_thoughts_fit_and_are_recorded_in_the_plan():
    gen = WindowedGenerator(["THINK", "RETRIEVE", "number", "it is 4 ."], window=384)
    policy = AcePolicy(gen, n_agents=2, rounds=4, passages_per_retrieval=3, tokenizer=tiny_tokenizer())
    plan = policy.build(long_conversation(20), "what is the number ?")
    recs = inner(plan.decisions.records, "ace.")
    assert recs and all(r["tokens_after"] <= r["room"] for r in recs) and gen.longest <= 384


def test_acr_router_prompt_fits_with_a_long_history():
    route = json.dumps({"analysis": "ok", "drift_detected": False, "selected_operator": "none"})
    gen = WindowedGenerator([route], window=1024)
    turns = [HistoryTurn(i, words(200, i), words(400, 50 + i)) for i in range(30)]
    record = []
    decision = Router(gen).route(turns, record=record)
    assert decision.valid and decision.selected_operator == "none"
    (rec,) = record
    assert rec["call"] == "acr.router" and rec["room"] == 1024 - 96 and rec["tokens_after"] <= rec["room"]
    assert rec["turns_dropped"] == 29 and rec["cut"]  # the oldest turns went whole; the newest one is cut to fit


def test_acr_refactorer_keeps_the_newest_turns_that_fit():
    from rhea.agents.acr.refactorer import Refactorer

    gen = WindowedGenerator(["<summary>ok</summary>"], window=2048)
    turns = [HistoryTurn(i, words(100, i), words(100, 50 + i)) for i in range(40)]
    record = []
    assert Refactorer(gen).refactor("fact_rectify", turns, record=record).context == "ok"
    (rec,) = record
    assert 0 < rec["turns_dropped"] < 40 and rec["cut"] == [] and rec["tokens_after"] <= rec["room"] == 2048 - 256
    assert "[turn 40]" in gen_prompt(gen) and "[turn 1]" not in gen_prompt(gen)


def gen_prompt(gen) -> str:
    return gen.last[-1]["content"]


def test_context_agent_summary_and_decisions_fit():
    gen = WindowedGenerator(["yes", "a summary ."], window=256)
    agent = ContextAgent(gen, HashingEmbedder(), summary_max_new_tokens=32)
    conv = Conversation()
    records = []
    for i in range(4):
        plan = agent.build(conv, f"turn {i} . " + words(300, i))
        records += plan.decisions.records
        conv.append(Turn(f"turn {i} . " + words(300, i), words(600, 70 + i)))
        agent.observe(conv[-1])
    records += agent.build(conv, "and now ?").decisions.records
    assert inner(records, "context_agent.summary") and inner(records, "context_agent.topic")
    assert gen.longest <= 256


def test_the_local_tool_generators_declare_their_room():
    from rhea.agents.sculptor.generators import tool_generator

    gen = tool_generator(tiny_rhea())
    room = prompt_room_of(gen, 64)
    assert room == gen.hf.window - 64 - gen.PREFILL_TOKENS
    assert gen.count_prompt_tokens([{"role": "user", "content": "hi"}]) > 0
