"""Token budgets against the model's window: every policy's plan fits `window - max_new_tokens`."""
import json
import os
import random

import pytest

from rhea.backends.embedding import HashingEmbedder
from rhea.context import (ContextPlan, ContextWindowError, Conversation, TokenBudget, Turn, TurnDecision, check_message,
                          fit_plan, measure_budget, render)
from rhea.context.budget import CUT_MARKER, cut_text, even_cap, fit_inner, fit_prompt, prompt_length, prompt_room_of
from rhea.errors import ContextOverflowError, RheaConfigError, RheaError
from rhea.policies import assemble_plan
from rhea.session import ChatSession
from rhea.session.generation import Generation, generate_from_plan
from rhea.testing import _WORDS, WindowedGenerator, tiny_rhea, tiny_tokenizer


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


class Repeat:
    """A `TextGenerator` that always writes the same reply (a controller or summarizer in tests)."""

    def __init__(self, reply: str):
        self.reply, self.calls = reply, 0

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls += 1
        return self.reply


def budget_record(plan):
    return next(r for r in reversed(plan.decisions.records) if r.get("event") == "budget")


# ---------------------------------------------------------------- the budget itself
def test_budget_is_the_window_less_the_reply_and_the_template():
    tok = tiny_tokenizer()
    b = measure_budget(tok, 512, 64)
    alone = render(ContextPlan([{"role": "user", "content": ""}]), tok).input_ids.shape[1]
    assert (b.window, b.max_new_tokens, b.prompt_tokens, b.template_overhead) == (512, 64, 448, alone)
    assert b.per_message == 3  # <|im_start|> assistant <|im_end|> (the word-level tokenizer drops newlines)
    with pytest.raises(ContextWindowError, match="lower max_new_tokens below 512"):
        TokenBudget(512, 512)
    with pytest.raises(RheaConfigError):
        measure_budget(tok, 0, 8)


def test_a_message_alone_over_the_window_is_a_named_error_saying_how_much_fits():
    tok = tiny_tokenizer()
    b = measure_budget(tok, 128, 16)
    assert check_message(words(50, 0), b, tok) <= b.prompt_tokens
    with pytest.raises(ContextWindowError, match=rf"leaves {b.message_tokens} for it") as e:
        check_message(words(500, 0), b, tok)
    assert isinstance(e.value, ContextOverflowError) and isinstance(e.value, RheaError)


def test_cut_text_keeps_start_and_end_around_a_visible_marker():
    tok = tiny_tokenizer()
    text = " ".join(f"{w}" for w in ("a b c d e f g h i j k l m n o p q r s t u v w x y z".split() * 8))
    cut, removed = cut_text(text, 40, tok)
    assert cut.startswith("a b c") and cut.rstrip().endswith("x y z")
    assert CUT_MARKER.format(n=removed) in cut and removed > 0
    assert len(tok(cut, add_special_tokens=False)["input_ids"]) <= 40 + 2
    assert cut_text("a b c", 40, tok) == ("a b c", 0)


def test_fit_plan_drops_the_lowest_scored_turns_first_and_records_why():
    tok = tiny_tokenizer()
    conv = Conversation([Turn(words(60, i), words(60, 100 + i)) for i in range(6)])
    scores = [0.9, 0.1, 0.5, 0.2, 0.8, 0.3]
    decisions = [TurnDecision(i, "raw", s) for i, s in enumerate(scores)]
    plan = assemble_plan("test", conv, "what now ?", decisions, system_source="Answer in French .", tokenizer=tok)
    budget = measure_budget(tok, 400, 16)
    fitted = fit_plan(plan, budget, tok)
    n = render(fitted, tok).input_ids.shape[1]
    assert n <= budget.prompt_tokens < render(plan, tok).input_ids.shape[1]
    rec = budget_record(fitted)
    # the three best turns (0.9, 0.8, 0.5) fit, one of them maybe cut; the others go lowest score first
    assert rec["dropped"][:2] == [1, 3]
    kept = [d.turn for d in fitted.decisions.turns if d.tier == "raw"]
    assert {0, 4} <= set(kept) and 1 not in kept and 3 not in kept
    for d in fitted.decisions.turns:
        if d.turn in rec["dropped"]:
            assert d.tier == "drop" and "reason=budget" in d.note
    assert fitted.system_text == "Answer in French ."  # the instruction block is reserved
    assert fitted.messages[-1] == {"role": "user", "content": "what now ?"}
    assert fitted.ledger.dropped_turns == len(rec["dropped"]) and fitted.ledger.text_tokens < plan.ledger.text_tokens
    assert plan.decisions.turns == decisions  # the policy's own plan is not changed


def test_fit_plan_cuts_one_over_long_turn_rather_than_lose_it():
    tok = tiny_tokenizer()
    conv = Conversation([Turn("my name is blue .", words(900, 1))])
    plan = assemble_plan("test", conv, "what is my name ?", [TurnDecision(0, "raw")], tokenizer=tok)
    budget = measure_budget(tok, 256, 16)
    fitted = fit_plan(plan, budget, tok)
    assert render(fitted, tok).input_ids.shape[1] <= budget.prompt_tokens
    (cut,) = budget_record(fitted)["cut"]
    assert cut["turn"] == 0 and fitted.decisions.turns[0].tier == "raw"
    reply = fitted.messages[1]["content"]
    assert CUT_MARKER.format(n=cut["tokens_cut"]) in reply and "reason=budget" in fitted.decisions.turns[0].note
    assert fitted.messages[0]["content"] == "my name is blue ."  # the longest text is cut, the short one kept


def test_fit_plan_cuts_the_instruction_block_only_when_no_turn_is_left():
    tok = tiny_tokenizer()
    plan = ContextPlan([{"role": "system", "content": words(400, 2)}, {"role": "user", "content": "and now ?"}])
    budget = measure_budget(tok, 128, 16)
    fitted = fit_plan(plan, budget, tok)
    assert render(fitted, tok).input_ids.shape[1] <= budget.prompt_tokens
    assert budget_record(fitted)["system_cut"] > 0 and "tokens cut" in fitted.system_text


def test_a_plan_that_fits_is_returned_as_is_with_the_budget_recorded():
    tok = tiny_tokenizer()
    plan = ContextPlan([{"role": "user", "content": "hi"}])
    out = fit_plan(plan, measure_budget(tok, 128, 16), tok)
    assert out is plan and budget_record(out)["prompt_tokens"] == 112 and budget_record(out)["dropped"] == []
    assert fit_plan(plan, None, tok) is plan


# ---------------------------------------------------------------- inner prompts (fit_prompt)
def _chat(n_history: int, size: int = 60) -> list[dict]:
    out = [{"role": "system", "content": "be brief ."}]
    for i in range(n_history):
        out += [{"role": "user", "content": f"turn {i} . " + words(size, 10 + i)},
                {"role": "assistant", "content": words(size, 200 + i)}]
    return out + [{"role": "user", "content": "what now ?"}]


def test_fit_prompt_keeps_system_and_last_user_and_drops_the_oldest_first():
    tok, log = tiny_tokenizer(), []
    msgs = _chat(6)
    out = fit_prompt(msgs, 300, tok, record=log, call="test.call")
    assert prompt_length(out, tok) <= 300 < prompt_length(msgs, tok)
    assert out[0] == msgs[0] and out[-1] == msgs[-1]
    assert out[-2] == msgs[-2]  # the newest history stays whole
    kept_turns = [m["content"].split(" . ")[0] for m in out if m["role"] == "user" and m["content"].startswith("turn")]
    assert kept_turns == sorted(kept_turns) and "turn 0" not in kept_turns and "turn 5" in kept_turns
    (rec,) = log
    assert rec["event"] == "inner_budget" and rec["call"] == "test.call" and rec["room"] == 300
    assert rec["tokens_before"] > 300 >= rec["tokens_after"] == prompt_length(out, tok)
    assert rec["dropped"] >= 1 and rec["dropped_messages"][0] == 1 and rec["dropped_tokens"] > 0  # oldest first
    assert msgs == _chat(6)  # the caller's messages are not changed


def test_fit_prompt_cuts_one_huge_message_in_its_middle_with_the_marker():
    tok, log = tiny_tokenizer(), []
    msgs = [{"role": "system", "content": "be brief ."}, {"role": "user", "content": "paris " + words(900, 3) + " json"}]
    out = fit_prompt(msgs, 200, tok, record=log)
    assert len(out) == 2 and out[0] == msgs[0] and prompt_length(out, tok) <= 200
    assert out[1]["content"].startswith("paris") and out[1]["content"].endswith("json")
    assert CUT_MARKER.format(n=log[0]["cut"][0]["tokens_cut"]) in out[1]["content"]


def test_fit_prompt_is_a_no_op_that_fits_or_without_a_window():
    tok, log = tiny_tokenizer(), []
    msgs = _chat(1)
    assert fit_prompt(msgs, 10_000, tok, record=log) is msgs and log == []
    big = _chat(20)
    assert fit_prompt(big, None, tok, record=log) is big and log == []
    assert fit_inner(Repeat("x"), big, 16, call="x", record=log) is big and log == []  # a double with no window
    assert prompt_room_of(Repeat("x"), 16) is None and prompt_room_of(WindowedGenerator("x", window=300), 16) == 284
    assert fit_prompt(big, measure_budget(tok, 400, 16), tok) != big  # a TokenBudget gives its prompt_tokens
    with pytest.raises(ContextWindowError, match="inner model's window"):
        fit_prompt([{"role": "user", "content": words(50, 1)}], 4, tok)


def test_fit_prompt_keeps_the_last_messages_asked_for_and_counts_each_text_once():
    tok = tiny_tokenizer()
    msgs = _chat(30) + [{"role": "assistant", "content": "a tool call"}, {"role": "tool", "content": "a result"}]
    renders = []

    def count(ms):
        renders.append(len(ms))
        return prompt_length(ms, tok)
    out = fit_prompt(msgs, 400, tok, keep_last=3, count=count)
    assert out[-3:] == msgs[-3:] and prompt_length(out, tok) <= 400
    assert len(renders) <= 2  # far over the room: estimated from cached counts, then one render to check


def test_even_cap_is_shared_with_the_rolling_summary():
    from rhea.policies import summary

    assert even_cap([10, 50, 200], 120) == 60 and not hasattr(summary, "_even_cap")


# ---------------------------------------------------------------- every policy, through a session
ROUTE = json.dumps({"analysis": "x", "drift_detected": True, "selected_operator": "fact_rectify"})
SEARCH = '<tool_call>{"name": "search_context", "arguments": {"query": "number"}}</tool_call>'
POLICIES = {
    "vanilla": {},
    "recent-k": {"k": 4},
    "bm25": {"k": 4},
    "summary": {"generator": Repeat(words(120, 7))},
    "rhea": {"scorer": "bm25"},
    "rhea-no-im": {"scorer": "bm25"},
    "rhea-all-raw": {"scorer": "bm25"},
    "rhea-drop-all": {},
    "reply-soft-compress": {},
    # the agents' generators are windowed doubles: a prompt over their window raises, so these runs prove
    # every inner prompt (router, refactorer, votes, queries, topic and branch calls, summaries, tool loop) fits
    "context-agent": {"embedder": HashingEmbedder(), "generator": WindowedGenerator(["yes", words(20, 9)], window=512)},
    "acr": {"controller": WindowedGenerator([ROUTE, "<summary>" + words(300, 8) + "</summary>"], window=1024)},
    "ace": {"llm": WindowedGenerator(["THINK", "RETRIEVE", "number", "it is " + words(10, 4)], window=512),
            "n_agents": 2, "rounds": 3},
    "sculptor": {"generator": WindowedGenerator([SEARCH, "the number is 4 ."], window=2048), "max_tool_calls": 2},
}
AGENTS = ("context-agent", "acr", "ace", "sculptor")


def _kwargs(name):
    kw = dict(POLICIES[name])
    for key in ("generator", "controller", "llm"):
        if isinstance(kw.get(key), Repeat):
            kw[key] = Repeat(kw[key].reply)
        elif isinstance(kw.get(key), WindowedGenerator):
            kw[key] = WindowedGenerator(kw[key].replies, window=kw[key].window)
    return kw


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_long_turns_on_every_policy_fit_the_window_and_are_answered(model, name):
    chat = ChatSession(model, policy=name, max_new_tokens=8, policy_kwargs=_kwargs(name))
    limit = chat.token_budget.prompt_tokens
    assert (chat.token_budget.window, limit) == (512, 504)
    inner = []
    for i in range(5):
        staged = chat.begin_turn(f"my number is {i} . " + words(150, i))
        assert render(staged.plan, model.tokenizer).input_ids.shape[1] <= limit
        inner += [r for r in staged.plan.decisions.records if r.get("event") == "inner_budget"]
        gen = generate_from_plan(model, staged.plan, max_new_tokens=8, adapter=chat._adapter_for(staged.plan))
        assert gen.prompt_tokens + 8 <= 512
        # the reply stored is long (a verbose model): 450 tokens of text
        chat.end_turn(staged, Generation(words(450, 50 + i), gen.prompt_tokens, gen.latent_slots, gen.new_tokens))
    rec = budget_record(chat.last_plan)
    assert rec["window"] == 512 and rec["max_new_tokens"] == 8 and rec["rendered_tokens"] <= limit
    if name in AGENTS:  # the history outgrew the inner generator's window: its prompts were cut, each recorded
        assert inner and all(r["tokens_after"] <= r["room"] < r["tokens_before"] for r in inner), name


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("RHEA_LONG_TESTS"), reason="about 10-45 min on 2 cores: RHEA_LONG_TESTS=1 runs it")
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_200_turn_conversation_of_600_token_turns_is_answered_on_every_turn(model, name):
    """200 turns of a 200-token message and a 400-token reply on a 512-token window: every turn's plan
    fits with the budget in its decisions; the model answers every 40th (and the last) plan for real."""
    chat = ChatSession(model, policy=name, max_new_tokens=8, policy_kwargs=_kwargs(name))
    limit = chat.token_budget.prompt_tokens
    peak = 0
    for i in range(200):
        staged = chat.begin_turn(words(200, 1000 + i))
        n = render(staged.plan, model.tokenizer).input_ids.shape[1]
        assert n <= limit, (i, n)
        peak = max(peak, n)
        assert budget_record(staged.plan)["prompt_tokens"] == limit
        if i % 40 == 0 or i == 199:
            gen = generate_from_plan(model, staged.plan, max_new_tokens=8, adapter=chat._adapter_for(staged.plan))
            assert gen.new_tokens >= 1
        chat.end_turn(staged, Generation(words(400, 5000 + i), n, 0, 8))
    assert len(chat.conversation) == 200
    if name not in ("rhea-drop-all", "summary", "acr", "context-agent"):
        assert peak > limit // 2  # the budget is used, not left idle


def test_the_message_alone_too_long_fails_before_any_model_work(model):
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=8)
    chat.send("hi")
    calls = chat.policy.counters()["compress_calls"]
    built = []
    real_build = chat.policy.build
    chat.policy.build = lambda *a, **k: built.append(1) or real_build(*a, **k)
    with pytest.raises(ContextWindowError, match="Split the message"):
        chat.send(words(600, 3))
    assert built == [] and chat.policy.counters()["compress_calls"] == calls and len(chat.conversation) == 1


def test_rhea_admits_turns_best_first_in_tokens_and_records_the_budget(model):
    chat = ChatSession(model, policy="rhea", max_new_tokens=8,
                       policy_kwargs={"scorer": "bm25", "recent_raw": 0, "max_raw": 10, "replan_every": 1})
    facts = ["the cat is blue", "the dog is red", "the fish is green"]
    for i, fact in enumerate(facts * 2):
        staged = chat.begin_turn(f"{fact} . " + words(100, i))
        chat.end_turn(staged, Generation(words(200, 40 + i), 0, 0, 8))
    staged = chat.begin_turn("what color is the dog ?")
    plan = staged.plan
    assert render(plan, model.tokenizer).input_ids.shape[1] <= chat.token_budget.prompt_tokens
    tiers = {d.turn: d for d in plan.decisions.turns}
    kept = [t for t, d in tiers.items() if d.tier == "raw"]
    assert kept and all("dog" in chat.conversation[t].user for t in kept[:1])
    over = [d for d in plan.decisions.turns if "reason=budget" in d.note]
    assert over, "six 300-token turns cannot all fit a 504-token prompt"


def test_a_session_follows_a_changed_max_new_tokens(model):
    chat = ChatSession(model, policy="vanilla", max_new_tokens=8)
    chat.max_new_tokens = 100
    assert chat.budget_for().prompt_tokens == 412 and chat.budget_for(200).prompt_tokens == 312


def test_replan_every_counts_queries_so_an_unchanged_history_gets_a_fresh_plan(model):
    from rhea.policies import get_policy

    policy = get_policy("rhea", model=model, scorer="bm25", recognizer=None, replan_every=3, replan_top=0)
    conv = Conversation([Turn("the cat is blue .", "ok ."), Turn("the dog is red .", "ok .")])
    policy.catch_up(conv)
    whys = []
    for _ in range(7):
        plan = policy.build(conv, "what color is the cat ?")
        whys.append(next(r["replan"]["why"] for r in plan.decisions.records if "replan" in r))
    assert whys == ["first plan", None, None, "3 queries since the plan", None, None, "3 queries since the plan"]


def test_the_instruction_reminder_follows_the_message_and_fits_the_window(model):
    """`instruction_reminder=True` restates the standing instruction after each message (the block stays in the
    system message), its tokens inside the budget: long turns still render within the window, and the turn
    stored is the message as the user wrote it."""
    chat = ChatSession(model, policy="rhea", max_new_tokens=8,
                       policy_kwargs={"scorer": "bm25", "instruction_reminder": True})
    limit = chat.token_budget.prompt_tokens
    rule = "From now on, always answer in French."
    for i in range(5):
        message = (rule + " " if i == 0 else "") + f"my number is {i} . " + words(150, i)
        staged = chat.begin_turn(message)
        plan = staged.plan
        assert plan.messages[-1]["content"] == message + "\n\n" + chat.policy.im.reminder()
        assert rule in plan.messages[-1]["content"].split("\n\n", 1)[1] and rule in plan.system_text
        assert render(plan, model.tokenizer).input_ids.shape[1] <= limit
        gen = generate_from_plan(model, plan, max_new_tokens=8, adapter=chat._adapter_for(plan))
        chat.end_turn(staged, Generation(words(450, 50 + i), gen.prompt_tokens, gen.latent_slots, gen.new_tokens))
    assert chat.conversation[0].user.startswith(rule) and "Standing instructions" not in chat.conversation[0].user
    assert chat.policy.config()["instruction_reminder"] is True
    chat.policy.reset()  # a reset forgets the rules, keeps the option
    assert chat.policy.instruction_reminder and not chat.policy.im.reminder()
    off = ChatSession(model, policy="rhea", max_new_tokens=8, policy_kwargs={"scorer": "bm25"})
    plan = off.begin_turn(rule + " what now ?").plan
    assert plan.messages[-1]["content"] == rule + " what now ?" and "instruction_reminder" not in off.policy.config()
    with pytest.raises(RheaConfigError, match="instruction_reminder"):
        ChatSession(model, policy="rhea", policy_kwargs={"instruction_reminder": "yes"})
