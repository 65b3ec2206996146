"""`rhea chat --demo` (what `make demo` runs) on the embedded model with the shipped adapters."""
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_demo_scores_and_tiers_past_turns_with_the_shipped_thresholds():
    from rhea.demo import run_demo

    lines = []
    out = run_demo(max_new_tokens=8, echo=lines.append)
    assert set(out["scores"]) == {0, 1} and set(out["tiers"]) == {0, 1}
    assert all(t in ("drop", "latent", "raw") for t in out["tiers"].values())
    assert out["tokens_hybrid"] <= out["tokens_full"]
    text = "\n".join(lines)
    assert "tau_low=" in text and "-> " in text and "assistant from the hybrid context" in text
