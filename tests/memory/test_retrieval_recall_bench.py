"""benchmarks/retrieval_recall.py: the paired comparison of two runs and the latent cache's owner check."""
import json
from pathlib import Path

import pytest
import torch

from tests.repo_scripts import load_script

RR = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "retrieval_recall.py")


def _layouts(latent, bm25):
    return {"returning": {"ranks": {"latent": latent, "bm25": bm25}}}


def test_versus_pairs_latent_scorers_question_by_question(tmp_path):
    other = tmp_path / "before.json"
    other.write_text(json.dumps({"layouts": _layouts([9, 9, 1, 7], [1, 1, 1, 1])}))
    got = RR.versus(_layouts([1, 2, 1, 7], [1, 1, 1, 1]), other, seed=0)
    row = got["layouts"]["returning"]["latent"]
    assert (row["this"], row["other"], row["diff"]) == (0.75, 0.25, 0.5)    # hits at 5: 3 of 4 against 1 of 4
    assert row["ci95"][0] <= 0.5 <= row["ci95"][1] and 0 <= row["p"] <= 1
    assert "bm25" not in got["layouts"]["returning"]                          # only scorers that read the latents
    other.write_text(json.dumps({"layouts": _layouts([1, 2], [1, 1])}))
    with pytest.raises(SystemExit, match="2 questions against 4"):
        RR.versus(_layouts([1, 2, 1, 7], [1, 1, 1, 1]), other, seed=0)
    other.write_text(json.dumps({"layouts": {"returning": {}}}))
    with pytest.raises(SystemExit, match="no per-question ranks"):
        RR.versus(_layouts([1], [1]), other, seed=0)
    with pytest.raises(SystemExit, match="no such file"):
        RR.versus(_layouts([1], [1]), tmp_path / "missing.json", seed=0)


def test_latent_cache_refuses_another_models_file(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "rhea_config.json").write_text("{}")
    path = tmp_path / "cache.pt"
    torch.save({"owner": "somewhere-else@123", "latents": {}}, path)
    with pytest.raises(SystemExit, match="holds latents of 'somewhere-else@123'"):
        RR.LatentCache(path, str(model))
    torch.save({"a text": torch.zeros(2)}, path)                              # written before owners were kept
    with pytest.raises(SystemExit, match="an unrecorded model"):
        RR.LatentCache(path, str(model))
    path.unlink()
    cache = RR.LatentCache(path, str(model))
    assert cache.owner.startswith(str(model.resolve())) and cache.store == {}


def test_latent_budgets_add_one_default_shaped_rule_each():
    """--latent-budgets M: the default's shape (2 x max_raw raw, the last W raw) with M latent turns, per window."""
    from rhea.modeling.config import RheaConfig

    args = RR.parse_args(["--data", "x", "--recent-raw", "3", "--latent-budgets", "14", "24"])
    rules = RR.build_tier_rules(RheaConfig(), args)
    assert "budget 10 raw + 8 latent + last 3" in rules  # the library default is still measured
    for m in (14, 24):
        rule = rules[f"budget 10 raw + {m} latent + last 3"]
        assert (rule.mode, rule.max_raw, rule.max_latent, rule.recent_raw, rule.latents) == ("budget", 10, m, 3, True)
    plain = RR.build_tier_rules(RheaConfig(), RR.parse_args(["--data", "x", "--recent-raw", "3"]))
    assert set(rules) - set(plain) == {"budget 10 raw + 14 latent + last 3", "budget 10 raw + 24 latent + last 3"}
