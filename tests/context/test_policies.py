import warnings

import pytest
import torch

from rhea.context import (
    ContextOverflowError,
    Conversation,
    EmptyMessageError,
    InvalidTurnError,
    Latent,
    Turn,
    TurnDecision,
    render,
)
from rhea.policies import (
    BM25,
    ContextPolicy,
    RecentK,
    RollingSummary,
    Vanilla,
    assemble_plan,
    available_policies,
    count_tokens,
    get_policy,
    register_policy,
)
from rhea.backends.llm import ScriptedGenerator
from rhea.backends.retrieval import BM25Retriever
from rhea.memory import InstructionalMemory

TURNS = [
    ("my cat is called Tom and he is orange", "Tom sounds like a lovely orange cat."),
    ("how do I sort a list in python", "Use sorted(xs) or xs.sort()."),
    ("what is the capital of france", "Paris."),
    ("recommend a book about dogs", "Try 'Marley and Me'."),
    ("what is 2 plus 2", "4."),
    ("thanks", "You're welcome!"),
]


@pytest.fixture
def conv():
    return Conversation([Turn(u, a) for u, a in TURNS])


def _roles(plan):
    return [m["role"] for m in plan.messages]


def test_registry_names_and_errors():
    assert {"vanilla", "recent-k", "bm25", "summary"} <= set(available_policies())
    assert isinstance(get_policy("vanilla"), Vanilla) and get_policy("recent-k", k=2).k == 2
    assert isinstance(get_policy("summary", generator=ScriptedGenerator([])), RollingSummary)
    with pytest.raises(ValueError, match="registered"):
        get_policy("nope")
    with pytest.raises(ValueError, match="already taken"):
        @register_policy("vanilla")
        class Other(ContextPolicy):
            def build(self, conversation, query):
                raise NotImplementedError


def test_vanilla_keeps_everything_in_order(conv):
    plan = Vanilla(system_prompt="Answer in French.").build(conv, "and my cat's name?")
    assert _roles(plan) == ["system"] + ["user", "assistant"] * len(TURNS) + ["user"]
    assert plan.messages[1]["content"] == TURNS[0][0] and plan.messages[-1]["content"] == "and my cat's name?"
    assert [d.tier for d in plan.decisions.turns] == ["raw"] * len(TURNS)
    assert plan.decisions.instructions == ["Answer in French."]
    ledger = plan.ledger
    assert ledger.dropped_turns == 0 and ledger.latent_slots == 0 and ledger.counter == "regex-approx"
    assert ledger.text_tokens == ledger.full_history_tokens == sum(count_tokens(m["content"]) for m in plan.messages)
    assert plan.policy == "vanilla"


def test_vanilla_truncates_oldest_with_warning_and_record(conv, tok):
    full = render(Vanilla(tokenizer=tok).build(conv, "and now ?"), tok).input_ids.shape[1]
    policy = Vanilla(max_context_tokens=full - 5, tokenizer=tok, system_prompt="be brief .")
    with pytest.warns(UserWarning, match="dropped the 1 oldest"):
        plan = policy.build(conv, "and now ?")
    assert render(plan, tok).input_ids.shape[1] <= full - 5
    tiers = [d.tier for d in plan.decisions.turns]
    assert tiers == ["drop"] + ["raw"] * (len(TURNS) - 1)
    assert "max_context_tokens" in plan.decisions.turns[0].note
    assert plan.decisions.records == [{"event": "truncate", "dropped_oldest": 1, "max_context_tokens": full - 5}]
    assert plan.ledger.dropped_turns == 1 and plan.ledger.counter == "tokenizer"
    assert plan.ledger.text_tokens < plan.ledger.full_history_tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fits: no warning
        Vanilla(max_context_tokens=full + 50, tokenizer=tok).build(conv, "and now ?")
    with pytest.raises(ContextOverflowError, match="max_context_tokens=3"):
        Vanilla(max_context_tokens=3, tokenizer=tok).build(conv, "and now ?")


def test_recent_k(conv):
    plan = RecentK(k=2).build(conv, "next?")
    assert [d.tier for d in plan.decisions.turns] == ["drop"] * 4 + ["raw", "raw"]
    assert plan.messages[0]["content"] == TURNS[4][0] and plan.ledger.dropped_turns == 4
    assert all(d.tier == "raw" for d in RecentK(k=50).build(conv, "next?").decisions.turns)
    assert _roles(RecentK().build(Conversation(), "first question")) == ["user"]


def test_bm25_keeps_relevant_turns_chronologically(conv):
    plan = BM25(k=2).build(conv, "what colour is my cat Tom, and any dogs book?")
    kept = [d.turn for d in plan.decisions.turns if d.tier == "raw"]
    assert kept == [0, 3]
    assert [m["content"] for m in plan.messages if m["role"] == "user"][:2] == [TURNS[0][0], TURNS[3][0]]
    scores = {d.turn: d.score for d in plan.decisions.turns}
    assert scores[0] > 0 and scores[3] > 0 and scores[5] == 0
    assert "no word shared" in plan.decisions.turns[5].note
    # conversation grows: the index follows it
    policy = BM25(k=1)
    assert [d.tier for d in policy.build(conv, "any mouse news?").decisions.turns] == ["drop"] * len(TURNS)
    conv.append(Turn("Tom the cat caught a mouse", "Good hunter!"))
    assert [d.turn for d in policy.build(conv, "any mouse news?").decisions.turns if d.tier == "raw"] == [6]
    assert _roles(BM25().build(Conversation(), "hello there")) == ["user"]


def test_bm25_retriever():
    r = BM25Retriever(["apples and pears", "pears", "car engines"])
    hits = r.search("pears", k=5)
    assert [i for i, _ in hits] == [1, 0] and hits[0][1] > hits[1][1] > 0
    assert r.search("zebra", k=2) == [] and BM25Retriever([]).search("x y", k=1) == []
    with pytest.raises(ValueError, match="k=0"):
        r.search("pears", k=0)
    with pytest.raises(EmptyMessageError):
        r.search("  ", k=1)
    with pytest.raises(ValueError, match="single str"):
        BM25Retriever("apples")


def test_summary_folds_every_m_turns_and_layers_instructions(conv):
    gen = ScriptedGenerator(["S1: cat Tom, python sort.", "S2: + Paris, dog book.", "S3: all."])
    im = InstructionalMemory()
    im.add("From now on, respond in French.", turn=0)
    policy = RollingSummary(gen, every=2, system_prompt=im)
    for turn in conv.turns[:3]:
        policy.observe(turn)
    assert policy.summary == "S1: cat Tom, python sort." and [t.user for t in policy.pending] == [TURNS[2][0]]
    assert "my cat is called Tom" in gen.calls[0][1]["content"]
    plan = policy.build(conv[:3], "and?")
    assert plan.system_text == im.render() + "\n\nSummary of the conversation so far:\nS1: cat Tom, python sort."
    assert [d.tier for d in plan.decisions.turns] == ["drop", "drop", "raw"]
    assert plan.decisions.instructions == ["From now on, respond in French."]
    assert plan.decisions.records[0]["turns_summarized"] == 2
    # build catches up on turns never observed
    plan = policy.build(conv, "and?")
    assert policy.summarized == 6 and [d.tier for d in plan.decisions.turns] == ["drop"] * 6
    assert "S3: all." in plan.system_text and "S1" not in plan.system_text
    with pytest.raises(ValueError, match="reset"):
        policy.build(conv[:2], "and?")


def test_summary_state_round_trip_and_empty_summary(conv):
    policy = RollingSummary(ScriptedGenerator(["   "]), every=1)
    with pytest.warns(UserWarning, match="keeping 1 turns verbatim"):
        policy.observe(conv[0])
    assert policy.summary == "" and len(policy.pending) == 1  # nothing lost
    state = policy.state_dict()
    assert state["name"] == "summary" and state["config"] == {"every": 1, "max_summary_tokens": 256}
    fresh = RollingSummary(ScriptedGenerator(["S"]), every=1)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    fresh.observe(conv[1])
    assert fresh.summary == "S" and fresh.summarized == 2
    with pytest.raises(ValueError, match="not 'summary'"):
        fresh.load_state_dict(RecentK().state_dict())
    fresh.reset()
    assert fresh.observed == 0 and fresh.summary == ""


def test_latent_tier_through_shared_assembly(conv, tok):
    lat = Latent(torch.randn(3, 8), source_turn=1)
    decisions = [TurnDecision(i, "raw" if i == 0 else "latent" if i == 1 else "drop", 0.5) for i in range(len(conv))]
    plan = assemble_plan("test", conv, "and now ?", decisions, latents={1: lat}, system_source="be brief .")
    assert plan.messages[4]["content"] == [lat] and plan.latents() == [lat]
    assert plan.ledger.latent_slots == 3 and plan.ledger.dropped_turns == 4
    out = render(plan, tok, literal_mem="escape")
    assert torch.equal(out.latent_embeds, lat.vectors)
    with pytest.raises(InvalidTurnError, match="no Latent"):
        assemble_plan("test", conv, "q", decisions)
    with pytest.raises(InvalidTurnError, match="one decision per turn"):
        assemble_plan("test", conv, "q", decisions[:-1])


def test_recalled_copy_follows_the_turn_it_names_so_a_kept_prompt_only_grows():
    conv = Conversation([Turn(f"u{i}", f"a{i}") for i in range(5)])
    decisions = [TurnDecision(0, "drop", 0.9, recalled=True, recalled_after=2), TurnDecision(1, "drop", 0.1),
                 TurnDecision(2, "raw"), TurnDecision(3, "drop", 0.8, recalled=True, recalled_after=3),
                 TurnDecision(4, "raw", recalled=False)]
    contents = [m["content"] for m in assemble_plan("test", conv, "q", decisions).messages]
    # turn 0's copy after turn 2 (where it was first recalled), turn 3's after turn 3, dropped in place
    assert contents == ["u2", "a2", "u0", "a0", "u3", "a3", "u4", "a4", "q"]
    # no place, or a place past the newest turn: after the newest turn, in turn order
    late = [TurnDecision(0, "drop", recalled=True), TurnDecision(1, "raw"), TurnDecision(2, "raw")]
    far = [TurnDecision(0, "drop", recalled=True, recalled_after=9), TurnDecision(1, "raw"), TurnDecision(2, "raw")]
    three = Conversation(list(conv)[:3])
    for ds in (late, far):
        assert [m["content"] for m in assemble_plan("test", three, "q", ds).messages][-3:] == ["u0", "a0", "q"]
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidTurnError, match="recalled_after"):
            TurnDecision(0, "drop", recalled=True, recalled_after=bad)


@pytest.mark.parametrize("make", [
    lambda: RecentK(k=0), lambda: RecentK(k=-1), lambda: RecentK(k=2.5), lambda: RecentK(k=True),
    lambda: BM25(k=0), lambda: Vanilla(max_context_tokens=0, tokenizer=object()),
    lambda: Vanilla(max_context_tokens=100), lambda: RollingSummary(ScriptedGenerator([]), every=0),
    lambda: RollingSummary("not a generator"), lambda: Vanilla(system_prompt=42),
])
def test_bad_policy_arguments(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("policy", [Vanilla(), RecentK(), BM25()])
@pytest.mark.parametrize("query", ["", "  \t"])
def test_empty_query_is_rejected(policy, query, conv):
    with pytest.raises(EmptyMessageError, match="query"):
        policy.build(conv, query)
