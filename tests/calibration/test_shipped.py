"""The adapters shipped for the zoo models: trained, calibrated, measured, fp16 and small (no model load)."""
from pathlib import Path

import pytest

import rhea
from rhea.modeling.config import FACT_RECALL_MIN_MARGIN, FACT_RECALL_MIN_RATIO, RheaConfig, latent_tier_active

ADAPTERS = Path(rhea.__file__).resolve().parent / "data" / "adapters"

#: what the package may carry per model. SmolLM2-135M: r16 on every linear layer in fp16 is ~10 MB, and the
#: retrieval read-out (score_head.safetensors, 2 x 576 -> 256 in fp16) 0.6 MB more. Qwen2.5-Coder-1.5B: the
#: compress LoRA r12 on every linear layer of 28 layers x 1536 in fp16 (27.7 MB) and the `states` projector
#: (1536 x 1536, 4.7 MB). Neither carries the base tokenizer (tokenizer_changes.json holds what rhea adds to it).
MAX_BYTES = {"smollm2-135m": 13_000_000, "qwen2.5-coder-1.5b": 36_000_000}


@pytest.mark.parametrize("name", sorted(MAX_BYTES))
def test_shipped_adapters_are_trained_calibrated_measured_fp16_and_small(name):
    from safetensors import safe_open

    ship = ADAPTERS / name
    cfg = RheaConfig.load(ship)
    assert cfg.extra["adapters_trained"] is True and cfg.base_model == name
    # `rhea calibrate` ran on these weights: thresholds fitted, the fit (met or not) recorded
    cal = cfg.extra["calibration"]
    assert isinstance(cal[cal["centering"]]["targets_met"], bool) and (cfg.tau_low, cfg.tau_high) != (0.5, 0.8)
    assert (cfg.latent_center is not None) == (cfg.latent_centering == "fixed")
    # benchmarks/reconstruction.py --write-fidelity ran on these weights (a shrunk model's source fidelity is cleared)
    assert cfg.fidelity is not None and cfg.fidelity["n"] >= 100
    assert {"reconstruction_token_acc", "control_gap", "measured_on"} <= set(cfg.fidelity)
    on, reason = latent_tier_active(cfg.latent_tier, cfg.fidelity)
    assert ("meets the target" in reason) == on
    files = list(ship.rglob("*.safetensors"))
    assert files and sum(f.stat().st_size for f in ship.rglob("*") if f.is_file()) < MAX_BYTES[name]
    for f in files:
        with safe_open(str(f), "pt") as st:
            assert all(str(st.get_slice(k).get_dtype()) in ("F16",) for k in st.keys()), f


def test_qwen_latent_tier_is_on_by_its_recorded_fact_recall():
    """Qwen2.5-Coder-1.5B's shipped compressor (step 1,181) reconstructs 0.98 of held-apart tokens and
    answers 0.52 of the held-apart facts through its latents against 0.80 with the reply as text and 0.02 dropped:
    the fact-recall rule (latent >= 0.6 x raw and >= dropped + 0.25) holds, so `auto` turns its latent tier on
    because of the fact-recall record (not reconstruction alone), and `latent_tier="off"` still turns it off."""
    cfg = RheaConfig.load(ADAPTERS / "qwen2.5-coder-1.5b")
    facts = cfg.fidelity["fact_recall"]
    assert facts["n"] >= 60 and facts["latent"] >= FACT_RECALL_MIN_RATIO * facts["raw"]
    assert facts["latent"] >= facts["dropped"] + FACT_RECALL_MIN_MARGIN
    mode = cfg.active_mode()
    assert mode["latent_tier"] is True and "fact recall" in mode["reason"]
    assert latent_tier_active("off", cfg.fidelity)[0] is False
    # the gate reads the record: the same reconstruction with the step-534 fact recall (0.42 / 0.80) keeps it off
    worse = dict(cfg.fidelity, fact_recall=dict(facts, latent=0.4167))
    assert latent_tier_active("auto", worse)[0] is False


def test_every_zoo_model_ships_adapters_and_every_shipped_directory_is_checked():
    """Both zoo models ship adapters, and a directory added under rhea/data/adapters without a
    size budget above would go unchecked."""
    shipped = {p.name for p in ADAPTERS.iterdir() if (p / "rhea_config.json").is_file()}
    assert shipped == set(MAX_BYTES), sorted(shipped ^ set(MAX_BYTES))


@pytest.mark.parametrize("name", sorted(MAX_BYTES))
def test_shipped_adapters_carry_a_true_manifest_and_no_tokenizer_copy(name):
    """Every shipped file has the SHA-256 its manifest records (what `from_pretrained` checks), and the tokenizer
    is a change record against the base model's (the `<mem>` token added), not an 11 MB copy of it."""
    import json

    from rhea.constants import MEM_TOKEN
    from rhea.modeling.checkpoint import MANIFEST_NAME, TOKENIZER_CHANGES_NAME, TOKENIZER_DIR
    from rhea.modeling.manifest import read_manifest, verify_manifest

    ship = ADAPTERS / name
    on_disk = {p.relative_to(ship).as_posix() for p in ship.rglob("*") if p.is_file()} - {MANIFEST_NAME}
    assert set(read_manifest(ship)) == on_disk
    assert verify_manifest(ship) == len(on_disk)
    assert not (ship / TOKENIZER_DIR).exists()
    record = json.loads((ship / TOKENIZER_CHANGES_NAME).read_text(encoding="utf-8"))
    assert record["base_model"] == name
    added = record["files"]["tokenizer.json"]["append_added_tokens"]
    assert [t["content"] for t in added] == [MEM_TOKEN] and added[0]["special"] is True
