"""scripts/ship_adapters.py: its refusals before anything loads, and the install that replaces a shipped directory."""
import json
from pathlib import Path

import pytest

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "ship_adapters.py"


@pytest.fixture(scope="module")
def ship():
    return load_script(_PATH)


def test_inputs_are_checked_before_anything_loads(ship, tmp_path):
    with pytest.raises(SystemExit, match="no rhea_config.json"):
        ship.check_inputs(tmp_path / "nothing", str(tmp_path))
    tiny_rhea().save_pretrained(tmp_path / "src")
    with pytest.raises(SystemExit, match="--data .* is not a directory"):
        ship.check_inputs(tmp_path / "src", str(tmp_path / "no-data"))
    with pytest.raises(SystemExit, match="not a zoo model"):  # the tiny model records no base_model
        ship.check_inputs(tmp_path / "src", str(tmp_path))
    cfg = json.loads((tmp_path / "src" / "rhea_config.json").read_text())
    cfg["base_model"] = "smollm2-135m"
    (tmp_path / "src" / "rhea_config.json").write_text(json.dumps(cfg))
    assert ship.check_inputs(tmp_path / "src", str(tmp_path)) == "smollm2-135m"
    with pytest.raises(SystemExit, match="no rhea_config.json"):
        ship.main([str(tmp_path / "nothing"), "--data", str(tmp_path), "--work", str(tmp_path / "w")])
    assert not (tmp_path / "w").exists()


def test_install_replaces_the_shipped_directory_and_leaves_nothing_behind(ship, tmp_path):
    work, target = tmp_path / "work", tmp_path / "adapters" / "m"
    (work / "compress").mkdir(parents=True)
    (work / "compress" / "a.txt").write_text("new")
    (target / "generate").mkdir(parents=True)
    (target / "generate" / "old.txt").write_text("old")
    ship.install(work, target)
    assert (target / "compress" / "a.txt").read_text() == "new" and not (target / "generate").exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["m"]
    ship.install(work, tmp_path / "adapters" / "fresh")  # nothing shipped before
    assert (tmp_path / "adapters" / "fresh" / "compress" / "a.txt").is_file()
