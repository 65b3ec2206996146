"""Integration: the held-apart fact-recall path on the embedded model (2 shipped items)."""
import pytest

from rhea.eval import fact_recall as fr

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_fact_recall_runs_on_the_embedded_model():
    from rhea import load_default_model

    model = load_default_model()[0].eval()
    items = fr.interleave_kinds(fr.load_items())[:2]
    rows = [fr.answer_item(model, it, c, max_new_tokens=8) for it in items for c in ("raw", "latent", "dropped")]
    assert all(r["answer"] for r in rows)
    by = {(r["id"], r["condition"]): r["prompt_tokens"] for r in rows}
    for it in items:  # the reply's ~60 text tokens become the model's n_mem slots, or nothing
        assert by[it.id, "raw"] > by[it.id, "latent"] > by[it.id, "dropped"]
    summary = fr.summarise(rows)
    assert summary["accuracy"]["raw"]["n"] == 2 and summary["criterion"]["passed"] in (True, False)
