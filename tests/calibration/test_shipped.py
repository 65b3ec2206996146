"""The adapters shipped for the embedded model carry their calibrated thresholds (no model load)."""
from pathlib import Path

import pytest

import rhea
from rhea.modeling.config import RheaConfig

SHIP = Path(rhea.__file__).resolve().parent / "data" / "adapters" / "smollm2-135m"


@pytest.mark.skipif(not (SHIP / "rhea_config.json").is_file(), reason="no default adapters shipped")
def test_shipped_adapters_are_trained_calibrated_fp16_and_small():
    from safetensors import safe_open

    cfg = RheaConfig.load(SHIP)
    assert cfg.extra["adapters_trained"] is True and cfg.base_model == "smollm2-135m"
    cal = cfg.extra["calibration"]
    assert cal[cal["centering"]]["targets_met"] and (cfg.tau_low, cfg.tau_high) != (0.5, 0.8)
    assert (cfg.latent_center is not None) == (cfg.latent_centering == "fixed")
    files = list(SHIP.rglob("*.safetensors"))
    assert files and sum(f.stat().st_size for f in SHIP.rglob("*") if f.is_file()) < 12_000_000
    for f in files:
        with safe_open(str(f), "pt") as st:
            assert all(str(st.get_slice(k).get_dtype()) in ("F16",) for k in st.keys()), f
