import pytest
import torch

from rhea.context import Conversation, Turn, render
from rhea.errors import RheaConfigError
from rhea.memory.episodic import EpisodicMemory
from rhea.policies import available_policies, get_policy

CONV = Conversation([
    Turn("what is the capital of france ?", "paris is the capital of france ."),
    Turn("what color is the cat ?", "the cat is blue ."),
    Turn("and the dog ?", "the dog is red ."),
])


# the paper's HCR: latent max-cosine, thresholds, latent tier on (tiny models record no compressor fidelity)
HCR = {"scorer": "latent", "tier_mode": "threshold", "latent_tier": "on", "recent_raw": 0}  # the paper's rule alone


def _observed(policy, conv=CONV):
    for t in conv:
        policy.observe(t)
    return policy


def test_rhea_family_registered():
    assert {"rhea", "rhea-no-im", "rhea-all-raw", "rhea-drop-all", "reply-soft-compress"} <= set(available_policies())


@pytest.mark.parametrize("tau", [(-1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)])
def test_tiers_follow_thresholds(tiny_model, tau):
    lo, hi = tau
    policy = _observed(get_policy("rhea", model=tiny_model, tau_low=lo, tau_high=hi, **HCR))
    plan = policy.build(CONV, "what is the capital ?")
    for d in plan.decisions.turns:
        expect = "raw" if d.score > hi else "drop" if d.score < lo else "latent"
        assert d.tier == expect
    if (lo, hi) == (-1.0, -1.0):
        assert {d.tier for d in plan.decisions.turns} == {"raw"}
    if (lo, hi) == (1.0, 1.0):
        assert {d.tier for d in plan.decisions.turns} == {"drop"}
    if (lo, hi) == (-1.0, 1.0):
        assert {d.tier for d in plan.decisions.turns} == {"latent"}
        r = render(plan, tiny_model.tokenizer)
        assert r.latent_embeds.shape == (3 * tiny_model.n_mem, tiny_model.hidden_size)


def test_scores_match_kernel_reference(tiny_model):
    from rhea_kernels.reference import turn_scores

    policy = _observed(get_policy("rhea", model=tiny_model, **HCR))
    plan = policy.build(CONV, "the cat")
    with torch.no_grad():
        vq = tiny_model.compress(["the cat"])
        vk = tiny_model.compress([t.assistant for t in CONV])
    ref = turn_scores(vq, vk[None])[0]
    got = torch.tensor([d.score for d in plan.decisions.turns])
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_each_reply_compressed_once_and_catch_up_batches(tiny_model):
    policy = _observed(get_policy("rhea", model=tiny_model, **HCR))
    assert policy.episodic.compress_calls == 3
    policy.build(CONV, "x y")
    assert policy.episodic.compress_calls == 4  # only the query
    fresh = get_policy("rhea", model=tiny_model, **HCR)  # never observed: catches up in one batch
    fresh.build(CONV, "x y")
    assert fresh.episodic.compress_calls == 2 and len(fresh.episodic) == 3


def test_instruction_goes_to_prefix_and_revocation_removes_it(tiny_model):
    policy = _observed(get_policy("rhea", model=tiny_model))
    plan = policy.build(CONV, "From now on, always answer in French.")
    assert plan.decisions.instructions == ["From now on, always answer in French."]
    assert plan.messages[0]["role"] == "system" and "French" in plan.messages[0]["content"]
    assert render(plan, tiny_model.tokenizer).prefix_len > 0
    rec = plan.decisions.records[0]["recognizer"]
    assert rec["kind"] == "add"
    again = policy.build(CONV, "From now on, always answer in French.")  # same turn: not added twice
    assert again.decisions.instructions == ["From now on, always answer in French."]
    conv = Conversation(list(CONV) + [Turn("From now on, always answer in French.", "d'accord")])
    policy.observe(conv[-1])
    plan = policy.build(conv, "You no longer need to answer in French.")
    assert plan.decisions.instructions == []
    assert not plan.messages[0]["role"] == "system" or "French" not in plan.messages[0]["content"]


def test_variants(tiny_model):
    q = "From now on, answer in one sentence."
    no_im = _observed(get_policy("rhea-no-im", model=tiny_model)).build(CONV, q)
    assert no_im.decisions.instructions == [] and no_im.messages[0]["role"] == "user"
    raw = _observed(get_policy("rhea-all-raw", model=tiny_model)).build(CONV, q)
    assert [d.tier for d in raw.decisions.turns] == ["raw"] * 3 and raw.decisions.instructions == [q]
    drop = _observed(get_policy("rhea-drop-all", model=tiny_model)).build(CONV, q)
    assert [d.tier for d in drop.decisions.turns] == ["drop"] * 3 and len(drop.messages) == 2
    rsc = _observed(get_policy("reply-soft-compress", model=tiny_model)).build(CONV, q)
    assert [d.tier for d in rsc.decisions.turns] == ["latent"] * 3 and rsc.ledger.latent_slots == 3 * tiny_model.n_mem
    assert rsc.decisions.instructions == []


def test_score_summary_warns_when_one_tier_dominates(tiny_model):
    conv = Conversation([Turn(f"q {i}", f"the cat is blue {i}") for i in range(6)])
    policy = _observed(get_policy("rhea", model=tiny_model, tau_low=-1.0, tau_high=-1.0, **HCR), conv)
    plan = policy.build(conv, "the cat")
    summary = plan.decisions.records[-1]["scores"]
    assert summary["tier_share"]["raw"] == 1.0 and "calibrate" in summary["warning"]


def test_bad_inputs(tiny_model):
    with pytest.raises(RheaConfigError, match="tau_low=0.9 must be <= tau_high=0.5"):
        get_policy("rhea", model=tiny_model, tau_low=0.9, tau_high=0.5)
    with pytest.raises(RheaConfigError, match="needs a RheaForCausalLM"):
        get_policy("rhea", model=object())
    with pytest.raises(RheaConfigError, match="fixed_tier"):
        get_policy("rhea", model=tiny_model, fixed_tier="sometimes")
    policy = _observed(get_policy("rhea", model=tiny_model, **HCR))
    with pytest.raises(ValueError, match="reset"):
        policy.build(Conversation([Turn("a", "something else")]), "q")


def test_episodic_state_round_trip(tiny_model):
    em = EpisodicMemory(tiny_model.compress)
    em.extend(list(CONV))
    other = EpisodicMemory(tiny_model.compress)
    other.load_state_dict(em.state_dict())
    assert torch.equal(em.score("the cat"), other.score("the cat"))
    with pytest.raises(ValueError, match="inconsistent"):
        other.load_state_dict({"users": ["a"], "assistants": [], "latents": None})


def test_replies_compressed_in_chunks_flow_through_scores_plan_and_state():
    """RheaConfig.compress_chunk_tokens: each reply is stored as ceil(tokens / c) blocks of n_mem rows; turns with
    uneven rows are scored as max-cosine over their own rows (kernel reference per turn), a latent turn renders
    all of its rows, and the episodic state round-trips the uneven rows."""
    from rhea_kernels.reference import turn_scores

    from rhea.testing import tiny_rhea

    model = tiny_rhea(n_mem=2, compress_chunk_tokens=3)
    tok = model.tokenizer
    policy = _observed(get_policy("rhea", model=model, tau_low=-1.0, tau_high=1.0, **HCR))
    lens = [len(tok(t.assistant, add_special_tokens=False)["input_ids"]) for t in CONV]
    rows = [e.latents.shape[0] for e in policy.episodic.entries]
    assert rows == [-(-n // 3) * 2 for n in lens] and len(set(rows)) > 1
    plan = policy.build(CONV, "the cat")
    assert {d.tier for d in plan.decisions.turns} == {"latent"}
    with torch.no_grad():
        vq = model.compress_replies(["the cat"])[0]
        ref = torch.stack([turn_scores(vq[None], e.latents[None, None].float())[0, 0] for e in policy.episodic.entries])
    torch.testing.assert_close(torch.tensor([d.score for d in plan.decisions.turns]), ref, rtol=1e-5, atol=1e-5)
    r = render(plan, tok)
    assert r.latent_embeds.shape[0] == sum(rows)
    again = EpisodicMemory(model.compress_replies)
    again.load_state_dict(policy.episodic.state_dict())
    assert [e.latents.shape[0] for e in again.entries] == rows
    assert torch.equal(again.score("the cat"), policy.episodic.score("the cat"))
    bad = policy.episodic.state_dict()
    bad["rows"] = bad["rows"][:-1]
    with pytest.raises(ValueError, match="rows"):
        again.load_state_dict(bad)


def test_a_turn_that_only_gave_a_revoked_instruction_is_dropped(tiny_model):
    # every past turn would be kept (raw or latent) by these thresholds; the one that only said
    # "call me Captain" must not come back once that rule is revoked, while a turn that also said
    # something else stays whatever happens to its instruction
    policy = get_policy("rhea", model=tiny_model, tau_low=-1.0, tau_high=1.0, **{**HCR, "recent_raw": 3})
    turns = [("From now on, call me Captain.", "Understood, Captain."),
             ("I'm in Lisbon. From now on, answer in Portuguese.", "Certo."),
             ("what color is the cat ?", "the cat is blue .")]
    conv = Conversation([])
    for user, reply in turns:
        policy.build(conv, user)
        conv = Conversation(list(conv) + [Turn(user, reply)])
        policy.observe(conv[-1])
    before = policy.build(conv, "what do you call me ?")
    assert [d.tier for d in before.decisions.turns] == ["raw"] * 3  # the last 3 turns are raw
    conv = Conversation(list(conv) + [Turn("what do you call me ?", "Captain.")])
    policy.observe(conv[-1])
    policy.build(conv, "Stop calling me Captain.")
    conv = Conversation(list(conv) + [Turn("Stop calling me Captain.", "Okay.")])
    policy.observe(conv[-1])
    plan = policy.build(conv, "You no longer need to answer in Portuguese.")
    tiers = [d.tier for d in plan.decisions.turns]
    assert tiers[0] == "drop" and "revoked at turn 4" in plan.decisions.turns[0].note
    assert tiers[1] != "drop"  # its first sentence is not an instruction: never retired
    assert plan.decisions.instructions == []
    assert not any("call me Captain" in str(m["content"]) for m in plan.messages)
    assert any("Lisbon" in str(m["content"]) for m in plan.messages) or tiers[1] == "latent"


# budget of one raw turn, no latents, nothing kept by recency: BM25 alone decides, so tiers change with the query
STICKY = {"scorer": "bm25", "tier_mode": "budget", "max_raw": 1, "max_latent": 0, "recent_raw": 0, "recognizer": None,
          "replan_top": 0}
TOPICS = [("the cat is blue .", "ok the cat is blue ."), ("the dog is red .", "ok the dog is red ."),
          ("the bird is green .", "ok the bird is green ."), ("the fish is gold .", "ok the fish is gold ."),
          ("the cow is brown .", "ok the cow is brown ."), ("the fox is grey .", "ok the fox is grey .")]
QUERIES = ["what color is the cat ?", "what color is the dog ?", "what color is the bird ?", "what color is the cat ?",
           "what color is the fish ?", "what color is the dog ?"]


def _replay(policy, n_before=3):
    """Plans for QUERIES[i] after n_before + i turns (each query's own turn appended after it)."""
    conv = Conversation([Turn(u, a) for u, a in TOPICS[:n_before]])
    policy.catch_up(conv)
    plans = []
    for i, q in enumerate(QUERIES[:len(TOPICS) - n_before + 1]):
        plans.append(policy.build(conv, q))
        if n_before + i < len(TOPICS):
            conv = Conversation(list(conv) + [Turn(*TOPICS[n_before + i])])
            policy.observe(conv[-1])
    return plans


def test_replan_every_keeps_the_last_plan_and_appends_new_turns_raw(tiny_model):
    every = _replay(get_policy("rhea", model=tiny_model, **STICKY, replan_every=1))
    sticky = _replay(get_policy("rhea", model=tiny_model, **STICKY, replan_every=3))
    tiers = lambda plan: [d.tier for d in plan.decisions.turns]  # noqa: E731
    # a fresh plan at the first query and again 3 queries later: the same decisions as re-planning every turn
    assert tiers(sticky[0]) == tiers(every[0]) == ["raw", "drop", "drop"]
    assert tiers(sticky[3]) == tiers(every[3])
    # in between, the plan made for "cat" stays (the dog's and bird's turns stay dropped) and new turns are raw
    assert tiers(every[1])[:3] != tiers(sticky[1])[:3]
    assert tiers(sticky[1]) == ["raw", "drop", "drop", "raw"] and tiers(sticky[2]) == ["raw", "drop", "drop", "raw", "raw"]
    assert "kept from the plan at turn 3 (re-planned every 3 turns)" in sticky[1].decisions.turns[0].note
    assert "after the plan at turn 3" in sticky[2].decisions.turns[4].note
    replans = [next(r["replan"] for r in p.decisions.records if "replan" in r) for p in sticky]
    assert [(r["planned_at"], r["fresh"]) for r in replans] == [(3, True), (3, False), (3, False), (6, True)]
    assert [r["why"] for r in replans] == ["first plan", None, None, "3 queries since the plan"]
    # so each prompt (all but its query) extends the one before until the next plan
    for a, b in ((sticky[0], sticky[1]), (sticky[1], sticky[2])):
        assert b.messages[:len(a.messages) - 1] == a.messages[:-1]
    assert not any("replan" in r for r in every[1].decisions.records)  # replan_every=1: the paper's rule, unrecorded


def test_replan_every_re_plans_when_the_instructions_or_earlier_turns_change(tiny_model):
    policy = get_policy("rhea", model=tiny_model, **{**STICKY, "recognizer": "default"}, replan_every=5)
    conv = Conversation([Turn(u, a) for u, a in TOPICS[:3]])
    policy.catch_up(conv)
    policy.build(conv, "what color is the cat ?")
    conv = Conversation(list(conv) + [Turn("what color is the cat ?", "blue .")])
    policy.observe(conv[-1])
    plan = policy.build(conv, "From now on, always answer in French.")  # the block changes: the prompt does anyway
    assert plan.decisions.instructions and next(r["replan"] for r in plan.decisions.records if "replan" in r)["fresh"]
    # a plan is for the turns it was made on: another conversation of the same length is planned afresh
    other = Conversation([Turn("the car is fast .", "ok .")] + list(conv)[1:])
    plan = policy.build(other, "and the dog ?")
    assert next(r["replan"] for r in plan.decisions.records if "replan" in r)["fresh"]
    with pytest.raises(RheaConfigError, match="replan_every=0 must be an int >= 1"):
        get_policy("rhea", model=tiny_model, replan_every=0)


def test_replan_state_survives_a_save(tiny_model):
    policy = get_policy("rhea", model=tiny_model, **STICKY, replan_every=3)
    _replay(policy, n_before=3)
    state = policy._state()
    again = get_policy("rhea", model=tiny_model, **STICKY, replan_every=3)
    again._load_state(state)
    assert again._plan["at"] == policy._plan["at"] and again._plan["decisions"] == policy._plan["decisions"]
    state.pop("plan")  # a session saved before replan_every existed
    again._load_state(state)
    assert again._plan is None


def test_replan_every_lets_the_session_reuse_the_last_prompt(tiny_model):
    from rhea.session import ChatSession

    reused = {}
    for k in (1, 3):
        chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=2, policy_kwargs={**STICKY, "replan_every": k})
        rows = []
        for text in [u for u, _ in TOPICS[:3]] + QUERIES[:4]:
            chat.send(text)
            fresh = next((r["replan"]["fresh"] for r in chat.last_plan.decisions.records if "replan" in r), True)
            rows.append((chat.last_generation.timings["prefix_reused_tokens"], chat.last_generation.prompt_tokens, fresh))
        reused[k] = rows
    assert [f for _, _, f in reused[3]] == [True, False, False, True, False, False, True]
    # under a kept plan the whole previous prompt is reused (all but its last token, which generation re-feeds)
    for (_, before, _), (now, _, fresh) in zip(reused[3], reused[3][1:]):
        assert fresh or now >= before - 1, reused[3]
    # re-planning every query, the max_raw=1 budget re-picks the raw turn and the prompt changes early
    assert sum(r for r, _, _ in reused[3]) > 2 * sum(r for r, _, _ in reused[1]), reused


def test_recalled_copies_keep_the_kept_prompt_growing_at_its_end_only(tiny_model):
    from rhea.session import ChatSession

    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=2,
                       policy_kwargs={**STICKY, "replan_top": 1, "replan_every": 3})
    rows = []
    for text in [u for u, _ in TOPICS[:3]] + ["cat ?", "dog ?", "bird ?", "cat ?"]:
        chat.send(text)
        replan = next((r["replan"] for r in chat.last_plan.decisions.records if "replan" in r), {"fresh": True})
        rows.append((chat.last_generation.timings["prefix_reused_tokens"], chat.last_generation.prompt_tokens,
                     replan["fresh"], replan.get("recalled", [])))
    assert any(recalled for *_, recalled in rows), rows  # the queries do bring hidden turns back
    # a kept plan's prompt, copies included, extends the last prompt and reply: all of it is reused
    for (_, before, _, _), (now, _, fresh, _) in zip(rows, rows[1:]):
        assert fresh or now >= before - 1, rows


def test_replan_top_re_plans_when_the_kept_plan_hides_a_turn_the_query_needs(tiny_model):
    # "cat" planned at turn 3 keeps only the cat's turn raw; "dog" needs the dog's turn, dropped under that plan
    checked = _replay(get_policy("rhea", model=tiny_model, **{**STICKY, "replan_top": 1}, replan_every=3,
                                 replan_hidden="replan"))
    every = _replay(get_policy("rhea", model=tiny_model, **STICKY, replan_every=1))
    replans = [next(r["replan"] for r in p.decisions.records if "replan" in r) for p in checked]
    assert replans[1]["fresh"] and "best turns is not raw under the plan of turn 3" in replans[1]["why"]
    assert [d.tier for d in checked[1].decisions.turns] == [d.tier for d in every[1].decisions.turns]
    # "bird" at turn 5: its turn is dropped under the dog's plan, so a fresh plan again; every plan is the fresh one
    assert all([d.tier for d in c.decisions.turns] == [d.tier for d in e.decisions.turns] for c, e in zip(checked, every))
    # a kept plan that serves the query carries the query's own scores beside the kept tier
    policy = get_policy("rhea", model=tiny_model, **{**STICKY, "replan_top": 1}, replan_every=3, replan_hidden="replan")
    conv = Conversation([Turn(u, a) for u, a in TOPICS[:3]])
    policy.catch_up(conv)
    policy.build(conv, "what color is the cat ?")
    conv = Conversation(list(conv) + [Turn("tell me more", "no .")])
    policy.observe(conv[-1])
    plan = policy.build(conv, "is the cat nice ?")
    first = plan.decisions.turns[0]
    assert first.tier == "raw" and first.score is not None and "now: bm25" in first.note
    assert not next(r["replan"] for r in plan.decisions.records if "replan" in r)["fresh"]


def test_replan_hidden_recall_shows_the_hidden_turn_after_the_newest_and_keeps_it_there_until_the_next_plan(tiny_model):
    recall = _replay(get_policy("rhea", model=tiny_model, **{**STICKY, "replan_top": 1}, replan_every=3))
    assert recall[0].decisions.records and [d.tier for d in recall[0].decisions.turns] == ["raw", "drop", "drop"]
    # "dog" after the plan for "cat": the dog's turn stays dropped in place and comes back after the newest turn
    plan = recall[1]
    replan = next(r["replan"] for r in plan.decisions.records if "replan" in r)
    assert (replan["fresh"], replan["recalled"], replan["hidden"]) == (False, [1], "recall")
    dog = plan.decisions.turns[1]
    assert dog.tier == "drop" and dog.recalled and "recalled raw after the newest turn" in dog.note
    contents = [m["content"] for m in plan.messages]
    assert contents[-3:] == [TOPICS[1][0], TOPICS[1][1], QUERIES[1]]  # recalled turn, then the query
    assert plan.ledger.dropped_turns == 1  # the bird's turn; the dog's is in the context
    # the prompt before the recalled copy extends the last one, and the next one keeps the copy where it was:
    # everything before the query stays, so the history cache reuses the whole previous prompt
    assert plan.messages[:len(recall[0].messages) - 1] == recall[0].messages[:-1]
    nxt = recall[2]
    assert nxt.messages[:len(plan.messages) - 1] == plan.messages[:-1]
    copies = [(d.turn, d.recalled_after) for d in nxt.decisions.turns if d.recalled]
    assert copies == [(1, 3), (2, 4)]  # the dog's copy after turn 3, where it was; "bird" needs turn 2, after turn 4
    assert "where an earlier query's best placed it" in nxt.decisions.turns[1].note
    contents = [m["content"] for m in nxt.messages]
    assert contents[-3:] == [TOPICS[2][0], TOPICS[2][1], QUERIES[2]]
    # the next fresh plan starts again without copies
    assert not any(d.recalled for d in recall[3].decisions.turns)


def test_replan_recall_max_bounds_the_copies_a_kept_plan_holds(tiny_model):
    """With at most one recalled copy, "bird" (whose turn the plan of "cat" hides, with the dog's copy already held)
    gets a fresh plan instead of a second copy; the bound is a named option that a bad value refuses."""
    bounded = _replay(get_policy("rhea", model=tiny_model, **{**STICKY, "replan_top": 1}, replan_every=3,
                                 replan_recall_max=1))
    replans = [next(r["replan"] for r in p.decisions.records if "replan" in r) for p in bounded]
    assert (replans[1]["fresh"], replans[1]["recalled"], replans[1]["recall_max"]) == (False, [1], 1)
    assert replans[2]["fresh"] and "past replan_recall_max=1 recalled copies" in replans[2]["why"]
    assert not any(d.recalled for d in bounded[2].decisions.turns)
    assert get_policy("rhea", model=tiny_model, replan_recall_max=4).config()["replan_recall_max"] == 4
    assert "replan_recall_max" not in get_policy("rhea", model=tiny_model).config()  # unbounded by default
    for bad in (-1, 1.5, True):
        with pytest.raises(RheaConfigError, match="replan_recall_max"):
            get_policy("rhea", model=tiny_model, replan_recall_max=bad)
