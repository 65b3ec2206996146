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
