"""`rhea chat --demo` (what `make demo` runs) on the embedded model with the shipped adapters:
the session's decisions, not the printout's format."""
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


@pytest.fixture(scope="module")
def demo():
    import torch

    from rhea.session.demo import run_demo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what `rhea chat --demo` runs with (rhea.cli.apply_threads)
    lines = []
    try:
        out = run_demo(echo=lines.append)
    finally:
        torch.set_num_threads(threads)
    return out, "\n".join(lines)


def test_the_instruction_is_captured_used_from_the_block_and_revoked(demo):
    from rhea.session.demo import INSTRUCTION, NAME, PROBE, REVOKE, SCRIPT

    out, _ = demo
    turns, instruction = out["turns"], SCRIPT[INSTRUCTION].user
    assert turns[INSTRUCTION]["instructions"] == [instruction]
    assert ("add", instruction) in turns[INSTRUCTION]["im_events"]
    assert all(t["instructions"] == [instruction] for t in turns[INSTRUCTION:REVOKE])
    # asked for its name, the model answers from the block: the instruction's own turn is not in the prompt
    probe = {d["turn"]: d for d in turns[PROBE]["decisions"]}
    assert probe[INSTRUCTION]["tier"] == "drop"
    assert NAME in turns[PROBE]["reply"]
    assert ("revoke", instruction) in turns[REVOKE]["im_events"]
    assert turns[REVOKE]["instructions"] == [] and turns[-1]["instructions"] == []
    # nor does the revoked rule come back through its own turn, whatever that turn scores
    revoked = {d["turn"]: d for d in turns[REVOKE]["decisions"]}
    assert revoked[INSTRUCTION]["tier"] == "drop"


def test_the_related_turn_is_kept_and_used_and_the_unrelated_ones_dropped(demo):
    from rhea.session.demo import FACT, FOLLOW_UP, _answer_words, SCRIPT

    out, _ = demo
    follow = {d["turn"]: d for d in out["turns"][FOLLOW_UP]["decisions"]}
    assert follow[FACT]["tier"] == "latent"  # the demo turns the latent tier on: the fact's reply is fed as <mem> latents
    assert all(d["tier"] == "drop" for t, d in follow.items() if t != FACT)
    words = _answer_words(SCRIPT[FACT].user, out["turns"][FACT]["reply"])
    assert words, "the related turn's reply holds the fact the follow-up asks for"
    repeated = [w for w in words if w in out["turns"][FOLLOW_UP]["reply"]]
    assert repeated
    # the control (the same follow-up with no history) says none of it: it came from the latents, not the model
    assert not any(w in out["control_reply"] for w in repeated), (repeated, out["control_reply"])
    assert out["checks"]["only_from_the_turn"]["ok"]
    # no decision the checks rely on hangs on a hair (the margins are printed too)
    relied = [follow[FACT]] + [d for t, d in follow.items() if t != FACT]
    assert all(d["margin"] is None or d["margin"] > 0.02 for d in relied), relied


def test_tokens_are_saved_and_every_check_passes(demo):
    out, text = demo
    fed = sum(t["tokens"] for t in out["turns"])
    full = sum(t["full_history_tokens"] for t in out["turns"])
    assert fed < full
    assert all(c["ok"] for c in out["checks"].values()), [c for c in out["checks"].values() if not c["ok"]]
    assert "trace of turn 5" in text and "[NO ]" not in text and "[control]" in text
