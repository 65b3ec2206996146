"""The adapters shipped for the embedded model: trained, calibrated, measured, fp16 and small (no model load)."""
from pathlib import Path

import pytest

import rhea
from rhea.modeling.config import RheaConfig, latent_tier_active

SHIP = Path(rhea.__file__).resolve().parent / "data" / "adapters" / "smollm2-135m"

#: the package carries the shipped directory (tokenizer included); r16 on every linear layer in fp16 is ~14 MB, and
#: since session 26 the retrieval read-out (score_head.safetensors, 2 x 576 -> 256 in fp16) 0.6 MB more
MAX_BYTES = 16_000_000


@pytest.mark.skipif(not (SHIP / "rhea_config.json").is_file(), reason="no default adapters shipped")
def test_shipped_adapters_are_trained_calibrated_measured_fp16_and_small():
    from safetensors import safe_open

    cfg = RheaConfig.load(SHIP)
    assert cfg.extra["adapters_trained"] is True and cfg.base_model == "smollm2-135m"
    # `rhea calibrate` ran on these weights: thresholds fitted, the fit (met or not) recorded
    cal = cfg.extra["calibration"]
    assert isinstance(cal[cal["centering"]]["targets_met"], bool) and (cfg.tau_low, cfg.tau_high) != (0.5, 0.8)
    assert (cfg.latent_center is not None) == (cfg.latent_centering == "fixed")
    # benchmarks/reconstruction.py --write-fidelity ran on these weights (a shrunk model's source fidelity is cleared)
    assert cfg.fidelity is not None and cfg.fidelity["n"] >= 100
    assert {"reconstruction_token_acc", "control_gap", "measured_on"} <= set(cfg.fidelity)
    on, reason = latent_tier_active(cfg.latent_tier, cfg.fidelity)
    assert ("meets the target" in reason) == on
    files = list(SHIP.rglob("*.safetensors"))
    assert files and sum(f.stat().st_size for f in SHIP.rglob("*") if f.is_file()) < MAX_BYTES
    for f in files:
        with safe_open(str(f), "pt") as st:
            assert all(str(st.get_slice(k).get_dtype()) in ("F16",) for k in st.keys()), f
