"""Integration: `rhea bench`'s runner on the embedded model; its outputs parse."""
import json

import pytest

from rhea.eval.runner import run_suite

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]


def test_bench_runs_on_the_embedded_model(tmp_path):
    from rhea import load_default_model

    model = load_default_model()[0].eval()
    result = run_suite(model, "instruction-retention", ["vanilla", "rhea"], n_turns=3, n_episodes=1,
                       max_new_tokens=6, out=tmp_path, progress=False, model_name="smollm2-135m")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["model"] == "smollm2-135m" == result["config"]["model"]
    for policy in ("vanilla", "rhea"):
        rows = saved["policies"][policy]["turns"]
        assert [r["kind"] for r in rows] == ["instruction", "query", "query"]
        assert all(r["reply"] and r["context_tokens"] > 0 and r["decode_s"] > 0 for r in rows)
    # rhea keeps the instruction in its memory and scores both past turns
    last = saved["policies"]["rhea"]["turns"][-1]
    assert last["decisions"]["instructions"] and len(last["decisions"]["turns"]) == 2
    assert all(d["score"] is not None for d in last["decisions"]["turns"])
    assert "| rhea |" in (tmp_path / "summary.md").read_text()
