"""The Rhea policy's scorers (latent / bm25 / dense / fused), budgeted tiers and the honest latent-tier default,
on tiny random models."""
import json

import pytest
import torch

from rhea.context import Conversation, Turn
from rhea.policies import get_policy
from rhea.backends.embedding import HashingEmbedder
from rhea.errors import RheaConfigError
from rhea.memory.scoring import latent_tier_active, mode_line
from rhea.modeling.config import CONFIG_NAME, RheaConfig

GOOD = {"reconstruction_token_acc": 0.95, "control_gap": 0.3, "measured_on": "test", "n": 10}
POOR = {"reconstruction_token_acc": 0.40, "control_gap": 0.0, "measured_on": "test", "n": 10}

TOPICS = ["the cat sleeps on the sofa all day", "python lists sort with sorted()", "paris is the capital of france",
          "the train to lyon leaves at nine", "my sister lives in oslo", "bake the bread for forty minutes",
          "the blue whale is the largest animal", "jupiter has many moons", "the meeting moved to friday",
          "tea tastes better with lemon", "the printer is out of toner", "lisbon has yellow trams"]
CONV = Conversation([Turn(f"tell me something ({i})", t) for i, t in enumerate(TOPICS)])


def _policy(model, **kw):
    kw.setdefault("embedder", HashingEmbedder(dim=128))
    kw.setdefault("recent_raw", 0)  # the tier rules alone; the window has its own test
    policy = get_policy("rhea", model=model, **kw)
    for t in CONV:
        policy.observe(t)
    return policy


def test_fused_decisions_record_every_component(tiny_model):
    policy = _policy(tiny_model, scorer="fused", fusion="rrf", fusion_components=["latent", "dense", "bm25"], latent_tier="on")
    plan = policy.build(CONV, "where does my sister live?")
    for d in plan.decisions.turns:
        assert set(d.components) == {"latent", "dense", "bm25"}
        assert "rrf" in d.note and d.score is not None
    # the fused score is the RRF of the recorded components
    from rhea.memory.scoring import fuse

    comps = {c: torch.tensor([d.components[c] for d in plan.decisions.turns]) for c in ("latent", "dense", "bm25")}
    torch.testing.assert_close(torch.tensor([d.score for d in plan.decisions.turns], dtype=torch.float64),
                               fuse(comps, "rrf"), atol=1e-6, rtol=0)
    # BM25 finds the one turn sharing words with the query; it ranks first and is raw text
    best = max(plan.decisions.turns, key=lambda d: d.score)
    assert best.turn == 4 and best.tier == "raw"
    retrieval = next(r["retrieval"] for r in plan.decisions.records if "retrieval" in r)
    assert retrieval["scorer"] == "fused" and retrieval["components"] == ["latent", "dense", "bm25"]
    # the JSON view carries the components too
    assert json.loads(json.dumps(plan.to_dict()))["decisions"]["turns"][0]["components"]


@pytest.mark.parametrize("scorer", ["latent", "bm25", "dense"])
def test_single_scorers(tiny_model, scorer):
    policy = _policy(tiny_model, scorer=scorer, max_raw=2, max_latent=0, latent_tier="off")
    plan = policy.build(CONV, "which moons does jupiter have?")
    assert all(set(d.components) == {scorer} for d in plan.decisions.turns)
    assert sum(d.tier == "raw" for d in plan.decisions.turns) <= 2
    assert policy.episodic.compress_calls == (len(CONV) + 1 if scorer == "latent" else 0)  # text scorers never compress


@pytest.mark.parametrize("max_raw,max_latent", [(1, 2), (3, 0), (0, 4)])
def test_budget_bounds_every_turn(tiny_model, max_raw, max_latent):
    policy = _policy(tiny_model, scorer="fused", fusion_components=["latent", "dense", "bm25"], tier_mode="budget",
                     max_raw=max_raw, max_latent=max_latent, latent_tier="on", tau_low=-1.0, tau_high=1.0)
    for q in ["where does my sister live?", "cats", "the the the", "trams in lisbon and trains to lyon"]:
        plan = policy.build(CONV, q)
        tiers = [d.tier for d in plan.decisions.turns]
        assert tiers.count("raw") <= max_raw and tiers.count("latent") <= max_latent
        assert plan.ledger.latent_slots == tiers.count("latent") * tiny_model.n_mem


def test_floors_drop_unrelated_turns_under_a_budget(tiny_model):
    # room for every turn, but only turns that share a word with the query (bm25 > 0) pass the floor
    policy = _policy(tiny_model, scorer="bm25", tier_mode="budget", max_raw=20, max_latent=20, latent_tier="off")
    plan = policy.build(CONV, "lisbon trams")
    assert [d.turn for d in plan.decisions.turns if d.tier != "drop"] == [11]
    policy = _policy(tiny_model, scorer="fused", fusion_components=["dense", "bm25"], max_raw=20, latent_tier="off",
                     dense_floor=0.99, dense_high=0.99)
    plan = policy.build(CONV, "lisbon trams")
    assert [d.turn for d in plan.decisions.turns if d.tier != "drop"] == [11]


def test_no_fidelity_means_no_latent_tier(tiny_model):
    assert tiny_model.config.fidelity is None
    # thresholds that would make every turn a latent: with the latent tier off they are raw text
    policy = _policy(tiny_model, scorer="latent", tier_mode="threshold", tau_low=-1.0, tau_high=1.0)
    plan = policy.build(CONV, "cats")
    assert {d.tier for d in plan.decisions.turns} == {"raw"} and plan.ledger.latent_slots == 0
    retrieval = next(r["retrieval"] for r in plan.decisions.records if "retrieval" in r)
    assert retrieval["latent_tier"] is False and "no measured compressor fidelity" in retrieval["latent_tier_reason"]
    # under a budget the best max_raw are raw and the rest dropped
    policy = _policy(tiny_model, scorer="latent", tier_mode="budget", max_raw=3, max_latent=5, tau_low=-1.0)
    tiers = [d.tier for d in policy.build(CONV, "cats").decisions.turns]
    assert tiers.count("raw") == 3 and tiers.count("latent") == 0 and tiers.count("drop") == len(CONV) - 3
    # asked for explicitly: latents come back
    policy = _policy(tiny_model, scorer="latent", tier_mode="threshold", tau_low=-1.0, tau_high=1.0, latent_tier="on")
    assert {d.tier for d in policy.build(CONV, "cats").decisions.turns} == {"latent"}


@pytest.mark.parametrize("fidelity,on", [(GOOD, True), (POOR, False), (None, False)])
def test_latent_tier_follows_the_recorded_fidelity(fidelity, on):
    from rhea.testing import tiny_rhea

    model = tiny_rhea(fidelity=fidelity)
    policy = _policy(model, scorer="latent", tier_mode="threshold", tau_low=-1.0, tau_high=1.0)
    tiers = {d.tier for d in policy.build(CONV, "cats").decisions.turns}
    assert tiers == ({"latent"} if on else {"raw"})
    assert policy.latents_on is on


def test_save_records_fidelity_and_active_mode(tmp_path):
    cfg = RheaConfig(fidelity=POOR, scorer="bm25")
    cfg.save(tmp_path)
    data = json.loads((tmp_path / CONFIG_NAME).read_text())
    assert data["fidelity"] == POOR
    assert data["extra"]["active_mode"] == {"scorer": "bm25", "tier_mode": cfg.tier_mode, "latent_tier": False,
                                            "reason": latent_tier_active("auto", POOR)[1]}
    back = RheaConfig.load(tmp_path)
    assert back.fidelity == POOR and back.scorer == "bm25"
    # an older rhea_config.json without the new fields loads with the defaults
    old = {k: v for k, v in data.items() if k in ("n_mem", "tau_low", "tau_high")}
    (tmp_path / CONFIG_NAME).write_text(json.dumps(old))
    assert RheaConfig.load(tmp_path).latent_tier == "auto"


def test_model_save_pretrained_records_active_mode(tmp_path):
    from rhea.testing import tiny_rhea

    tiny_rhea(fidelity=GOOD).save_pretrained(tmp_path / "m")
    mode = json.loads((tmp_path / "m" / CONFIG_NAME).read_text())["extra"]["active_mode"]
    assert mode["latent_tier"] is True and "meets the target" in mode["reason"]


def test_mode_line_says_which_mode_and_why():
    line = mode_line(RheaConfig(fidelity=GOOD, tier_mode="budget", max_raw=4, max_latent=6))
    assert "budget tiers (<= 4 raw, <= 6 latent)" in line and "latent tier on" in line
    line = mode_line(RheaConfig(fidelity=POOR, tier_mode="threshold"))
    assert "threshold tiers" in line and "below the target" in line


def test_bad_scorer_settings(tiny_model):
    for kw, match in [({"scorer": "magic"}, "scorer="), ({"fusion": "max"}, "fusion="),
                      ({"fusion_components": ["bm25", "tfidf"]}, "fusion_components"),
                      ({"fusion_weights": [1.0]}, "fusion_weights"), ({"tier_mode": "x"}, "tier_mode"),
                      ({"max_raw": -1}, "max_raw"), ({"latent_tier": "maybe"}, "latent_tier")]:
        with pytest.raises(RheaConfigError, match=match):
            get_policy("rhea", model=tiny_model, **kw)
    for kw, match in [({"scorer": "magic"}, "scorer="), ({"fusion_components": []}, "fusion_components"),
                      ({"fusion_weights": [1.0]}, "fusion_weights"), ({"max_latent": 1.5}, "max_latent"),
                      ({"fidelity": {"acc": 1}}, "fidelity"), ({"dense_floor": 0.9, "dense_high": 0.5}, "dense_floor")]:
        with pytest.raises(RheaConfigError, match=match):
            RheaConfig(**kw)


def test_config_rebuilds_the_policy(tiny_model):
    policy = _policy(tiny_model, scorer="fused", fusion="zsum", fusion_components=["latent", "bm25"],
                     fusion_weights=[0.5, 2.0], tier_mode="threshold", max_raw=2, latent_tier="on")
    again = get_policy("rhea", model=tiny_model, embedder=HashingEmbedder(dim=128), **policy.config())
    assert again.config() == policy.config()
    a, b = policy.build(CONV, "cats"), _observe(again).build(CONV, "cats")
    assert [(d.tier, d.score) for d in a.decisions.turns] == [(d.tier, d.score) for d in b.decisions.turns]


def _observe(policy):
    for t in CONV:
        policy.observe(t)
    return policy


def test_chat_mode_line_reads_the_saved_config(tmp_path):
    from rhea.session.cli import retrieval_mode_line
    from rhea.testing import tiny_rhea

    tiny_rhea(fidelity=POOR).save_pretrained(tmp_path / "m")
    line = retrieval_mode_line(str(tmp_path / "m"))
    assert line.startswith("retrieval: scorer") and "latent tier off" in line and "0.4" in line
    assert retrieval_mode_line(str(tmp_path / "nowhere")) is None


@pytest.mark.parametrize("kw", [dict(scorer="bm25", tier_mode="budget", max_raw=1, latent_tier="off"),
                                dict(scorer="fused", fusion_components=["dense", "bm25"], tier_mode="threshold",
                                     latent_tier="off", dense_floor=0.99, dense_high=0.99),
                                dict(scorer="latent", tier_mode="threshold", latent_tier="on", tau_low=0.99,
                                     tau_high=0.995)])
def test_recent_raw_keeps_the_last_turns_whatever_they_score(tiny_model, kw):
    plan = _policy(tiny_model, recent_raw=2, **kw).build(CONV, "lisbon trams")
    tiers = [d.tier for d in plan.decisions.turns]
    assert tiers[-2:] == ["raw", "raw"] and all("recent" in d.note for d in plan.decisions.turns[-2:])
    without = [d.tier for d in _policy(tiny_model, **kw).build(CONV, "lisbon trams").decisions.turns]
    assert tiers[:-2] == without[:-2]  # the window adds the last turns; the rest is decided as before
    if kw["tier_mode"] == "budget":  # window turns do not use max_raw (turn 11, the trams, is in the window)
        assert tiers.count("raw") == 2 and without.count("raw") == 1
    retrieval = next(r["retrieval"] for r in plan.decisions.records if "retrieval" in r)
    assert retrieval["recent_raw"] == 2
    with pytest.raises(RheaConfigError, match="recent_raw"):
        RheaConfig(recent_raw=-1)
    assert "last 2 turns raw" in mode_line(RheaConfig(recent_raw=2))


def test_text_scorers_compress_only_the_replies_a_plan_shows_as_latents(tiny_model, tmp_path):
    """With text scorers and the latent tier on, observing compresses nothing; a plan compresses the replies it
    places in the latent tier (one batch), a later plan reuses them, and its records say why the rest hold none."""
    from rhea.session import ChatSession

    policy = _policy(tiny_model, scorer="fused", latent_tier="on", max_raw=2, max_latent=3, replan_every=1)
    assert policy.needs_latents and not policy.compresses_every_reply
    assert policy.episodic.compress_calls == 0 and len(policy.episodic) == 0
    plan = policy.build(CONV, "where does my sister live?")
    latent = [d.turn for d in plan.decisions.turns if d.tier == "latent"]
    assert 1 <= len(latent) <= 3 and policy.episodic.compress_calls == 1
    assert [e.turn for e in policy.episodic.entries] == latent
    record = next(r["compression"] for r in plan.decisions.records if "compression" in r)
    assert record["compressed_now"] == latent and record["stored"] == len(latent)
    assert f"{len(latent)} of {len(CONV)} past replies hold latents" in record["why"]
    # the latents shown are those of each reply compressed alone
    for turn in latent:
        with torch.no_grad():
            ref = tiny_model.compress_replies([CONV[turn].assistant])[0].float()
        torch.testing.assert_close(policy.episodic.get(turn).latents, ref, rtol=1e-5, atol=1e-5)
    again = policy.build(CONV, "where does my sister live?")
    assert policy.episodic.compress_calls == 1  # the same latent turns: nothing compressed again
    assert next(r["compression"] for r in again.decisions.records if "compression" in r)["compressed_now"] == []
    # the sparse memory round-trips through a saved session
    chat = ChatSession(tiny_model, policy=policy, max_new_tokens=2)
    chat.conversation = Conversation(list(CONV))
    chat.ask("where does my sister live?")
    chat.save(tmp_path / "s")
    back = ChatSession.load(tmp_path / "s", tiny_model)
    assert [e.turn for e in back.policy.episodic.entries] == [e.turn for e in chat.policy.episodic.entries]
    assert all(torch.equal(a.latents, b.latents) for a, b in zip(back.policy.episodic.entries, chat.policy.episodic.entries))


def test_a_latent_score_still_compresses_every_reply_as_it_arrives(tiny_model):
    policy = _policy(tiny_model, scorer="fused", fusion_components=["latent", "bm25"], latent_tier="on")
    assert policy.compresses_every_reply and len(policy.episodic) == len(CONV)


def test_a_dropped_turn_says_why(tiny_model):
    policy = _policy(tiny_model, scorer="bm25", max_raw=1, max_latent=0, latent_tier="off", replan_every=1)
    plan = policy.build(CONV, "where does my sister live in oslo?")
    tiers = [d.tier for d in plan.decisions.turns]
    assert tiers.count("raw") == 1 and tiers[4] == "raw"
    for d in plan.decisions.turns:
        if d.tier != "drop":
            assert "dropped" not in d.note
        elif d.components["bm25"] > 0:  # shares a word with the query, but the budget keeps one turn
            assert "dropped: ranked after the turns the budget keeps (1 raw)" in d.note
        else:
            assert "dropped: below every floor (bm25 0: no word shared)" in d.note
    assert any("below every floor" in d.note for d in plan.decisions.turns)


def test_latent_bytes_bounds_the_latents_a_long_conversation_keeps(tiny_model):
    """Plans that show other turns as latents, question after question: past `latent_bytes` the latents shown least
    recently are let go (never the current plan's), a turn shown again is compressed again, and the tiers chosen
    are the unbounded policy's."""
    queries = [f"what about {t.split()[1]} ?" for t in TOPICS]
    kw = dict(scorer="fused", latent_tier="on", max_raw=2, max_latent=3, replan_every=1)
    free = _policy(tiny_model, latent_bytes=None, **kw)
    plans_free = [free.build(CONV, q) for q in queries]
    one = free.episodic.entries[0].latents
    bound = 3 * one.element_size() * one.nelement()
    held = _policy(tiny_model, latent_bytes=bound, **kw)
    assert held.episodic.max_bytes == bound and held.config()["latent_bytes"] == bound
    for q, ref in zip(queries, plans_free):
        plan = held.build(CONV, q)
        assert [d.tier for d in plan.decisions.turns] == [d.tier for d in ref.decisions.turns]
        shown = {d.turn for d in plan.decisions.turns if d.tier == "latent"}
        assert shown <= {e.turn for e in held.episodic.entries}  # what the plan shows is held
        assert held.episodic.nbytes() <= max(bound, len(shown) * one.element_size() * one.nelement())
    assert len(free.episodic) > 3 and held.episodic.evictions > 0
    assert held.episodic.compress_calls >= free.episodic.compress_calls
    # held again, the first question's latents are compressed anew: the same values
    first = {d.turn for d in plans_free[0].decisions.turns if d.tier == "latent"}
    held.build(CONV, queries[0])
    for turn in first:
        torch.testing.assert_close(held.episodic.get(turn).latents, free.episodic.get(turn).latents, rtol=1e-5, atol=1e-5)


def test_a_memory_that_scores_every_turn_is_not_bounded(tiny_model):
    policy = _policy(tiny_model, scorer="latent", latent_tier="on", latent_bytes=1)
    assert policy.compresses_every_reply and policy.episodic.max_bytes is None and len(policy.episodic) == len(CONV)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1GB", True])
def test_bad_latent_bytes_is_a_named_error(tiny_model, bad):
    with pytest.raises(RheaConfigError, match="latent_bytes"):
        get_policy("rhea", model=tiny_model, latent_bytes=bad)


def test_latent_dtype_sets_what_a_stored_latent_costs_and_scores_stay_float32(tiny_model):
    """Latents are stored in the model's dtype by default; bfloat16 halves a float32 model's latent bytes, the
    generate pass still gets them in the model's dtype, and the latent scores barely move."""
    kw = dict(scorer="latent", latent_tier="on", replan_every=1)
    full = _policy(tiny_model, **kw)  # "model": the tiny model is float32
    half = _policy(tiny_model, latent_dtype="bfloat16", **kw)
    assert full.episodic.entries[0].latents.dtype == tiny_model.dtype == torch.float32
    assert half.episodic.entries[0].latents.dtype == torch.bfloat16 and half.config()["latent_dtype"] == "bfloat16"
    assert "latent_dtype" not in full.config()
    assert half.episodic.nbytes() * 2 == full.episodic.nbytes()
    query = "what about the cat ?"
    torch.testing.assert_close(half.episodic.score(query), full.episodic.score(query), atol=2e-2, rtol=0)
    plan = half.build(CONV, query)
    assert plan.latents() and all(lat.vectors.dtype == tiny_model.dtype for lat in plan.latents())
    # a saved state reloads in the dtype the policy stores
    again = _policy(tiny_model, latent_dtype="bfloat16", **kw)
    again._load_state(full._state())
    assert again.episodic.entries[0].latents.dtype == torch.bfloat16


@pytest.mark.parametrize("bad", ["fp8", "bf16", None, 16])
def test_bad_latent_dtype_is_a_named_error(tiny_model, bad):
    with pytest.raises(RheaConfigError, match="latent_dtype"):
        get_policy("rhea", model=tiny_model, latent_dtype=bad)
