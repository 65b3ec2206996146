"""The model card `save_pretrained` writes (`rhea.modeling.card`): it describes the directory, not PEFT's template."""
import json

import pytest

from rhea.modeling.card import main, model_card, write_model_card
from rhea.modeling.config import RheaConfig


def test_save_pretrained_writes_a_card_that_describes_the_directory(tmp_path):
    from rhea.testing import tiny_rhea

    model = tiny_rhea(n_mem=4, latent_injection="projector",
                      fidelity={"reconstruction_token_acc": 0.6123, "control_gap": 0.3, "measured_on": "test", "n": 9})
    model.save_pretrained(tmp_path)
    card = (tmp_path / "README.md").read_text()
    assert "More Information Needed" not in card  # PEFT's template is replaced
    assert card.startswith("---\nbase_model: ") and "# Rhea adapters for" in card
    assert "| compress | 4 | 8 |" in card and "| generate | 4 | 8 |" in card  # tiny_rhea: r4, alpha 8
    assert "4 latent vectors" in card and "latent injection: `projector`" in card
    assert "**0.6123**" in card and "latent tier off" in card and "n = 9" in card
    assert "`latent_injector.safetensors`" in card and "Not calibrated" in card
    # files the directory lacks are not listed
    assert "latent_injector" not in model_card(RheaConfig(), {}, files={"rhea_config.json"})


def test_card_reports_calibration_training_and_a_passing_compressor():
    cfg = RheaConfig(base_model="m", fidelity={"reconstruction_token_acc": 0.95, "control_gap": 0.2,
                                               "measured_on": "x", "n": 144},
                     extra={"adapters_trained": True, "training": {"optimizer_steps": 100},
                            "calibration": {"centering": "fixed", "n_triples": 336,
                                            "fixed": {"tau_low": 0.372509, "tau_high": 0.710567, "keep_rate": 0.97,
                                                      "drop_rate": 0.97, "ranking_accuracy": 0.997,
                                                      "targets_met": True}}})
    card = model_card(cfg, {"compress": {"r": 16, "lora_alpha": 32, "target_modules": "all-linear"}})
    assert "latent tier on" in card and "Adapters trained: **yes**" in card
    assert "tau_low 0.373, tau_high 0.711" in card and "336" in card and "optimizer_steps = 100" in card
    assert "| compress | 16 | 32 | all-linear |" in card


def test_card_reports_a_recorded_fact_recall_and_what_it_decides():
    facts = {"latent": 0.4167, "raw": 0.8, "dropped": 0.0167, "n": 60, "measured_on": "benchmarks/fact_recall.py run"}
    cfg = RheaConfig(base_model="m", fidelity={"reconstruction_token_acc": 0.9587, "control_gap": 0.596,
                                               "measured_on": "x", "n": 144, "fact_recall": facts})
    card = model_card(cfg, {})
    assert "reply as latents **0.417**, as text 0.8, dropped 0.0167" in card and "n = 60" in card
    assert "latent tier off" in card and "0.6 x as often as the text" in card


def test_card_cli_rewrites_an_old_directory_and_needs_an_argument(tmp_path, capsys):
    RheaConfig(base_model="m").save(tmp_path)
    (tmp_path / "compress").mkdir()
    (tmp_path / "compress" / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16,
                                                                           "target_modules": ["v_proj", "q_proj"]}))
    (tmp_path / "README.md").write_text("More Information Needed")
    assert main([str(tmp_path)]) == 0
    assert "| compress | 8 | 16 | q_proj, v_proj |" in (tmp_path / "README.md").read_text()
    assert main([]) == 2 and "usage" in capsys.readouterr().err
    with pytest.raises(Exception, match="rhea_config.json"):
        write_model_card(tmp_path / "nothing-here")
