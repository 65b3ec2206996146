"""RheaForCausalLM.shrink_lora_rank and `rhea shrink`: adapters cut to a lower rank by a truncated SVD."""
import json

import pytest
import torch
from peft.tuners.lora import LoraLayer
from safetensors import safe_open

from rhea.errors import RheaConfigError
from rhea.modeling import RheaForCausalLM
from rhea.modeling.shrink import cast_safetensors, shrink_model
from rhea.testing import save_tiny_base, tiny_llama, tiny_rhea, tiny_tokenizer

TEXTS = ["one reply", "another reply"]


def _layers(model):
    return {n: m for n, m in model.peft_model.named_modules() if isinstance(m, LoraLayer)}


def _updates(model, adapter):
    return {n: (m.scaling[adapter] * m.lora_B[adapter].weight @ m.lora_A[adapter].weight).detach().double()
            for n, m in _layers(model).items()}


def _randomize(model, adapter, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in _layers(model).values():
            b = m.lora_B[adapter].weight
            b.copy_(torch.randn(b.shape, generator=g) * 0.3)


def test_shrink_is_exact_when_the_update_fits_the_new_rank():
    """An update of rank <= r survives unchanged: grow 4 -> 10 (new directions zero), shrink back to 4."""
    model = tiny_rhea(n_mem=3, latent_injection="states")
    _randomize(model, "compress")
    with torch.no_grad():
        lat = model.compress(TEXTS)
    model.resize_lora_rank("compress", 10)
    info = model.shrink_lora_rank("compress", 4)
    assert info["rank_before"] == 10 and info["rank_after"] == 4 and info["layers"] == len(_layers(model))
    assert info["energy_kept_min"] == pytest.approx(1.0) and info["rel_error_max"] < 1e-6
    assert model.lora_rank("compress") == 4 and model.peft_model.peft_config["compress"].lora_alpha == 8
    with torch.no_grad():
        torch.testing.assert_close(model.compress(TEXTS), lat, rtol=1e-4, atol=1e-5)


def test_shrink_keeps_the_best_low_rank_update_and_round_trips(tmp_path):
    """Each layer's new update is the rank-r truncated SVD of the old one (Eckart-Young), the scale alpha/r is
    kept, the other adapter is untouched, the reported energy is the kept share, and the save reloads."""
    model = tiny_rhea(n_mem=3)
    _randomize(model, "compress")
    before, generate = _updates(model, "compress"), _updates(model, "generate")
    scales = {n: m.scaling["compress"] for n, m in _layers(model).items()}
    info = model.shrink_lora_rank("compress", 2)
    after = _updates(model, "compress")
    kept = []
    for n, dw in before.items():
        u, s, vh = torch.linalg.svd(dw, full_matrices=False)
        torch.testing.assert_close(after[n], (u[:, :2] * s[:2]) @ vh[:2], rtol=1e-5, atol=1e-6)
        kept.append(float((s[:2] ** 2).sum() / (s ** 2).sum()))
        assert _layers(model)[n].scaling["compress"] == scales[n]
    assert info["energy_kept_min"] == pytest.approx(min(kept), rel=1e-6)
    assert info["energy_kept_mean"] == pytest.approx(sum(kept) / len(kept), rel=1e-6)
    assert 0 < info["rel_error_max"] < 1
    for n, dw in _updates(model, "generate").items():
        torch.testing.assert_close(dw, generate[n])
    with torch.no_grad():
        lat = model.compress(TEXTS)
    model.save_pretrained(tmp_path)
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.lora_rank("compress") == 2 and again.lora_rank("generate") == 4
    with torch.no_grad():
        torch.testing.assert_close(again.compress(TEXTS), lat)


def test_shrinking_a_zero_adapter_leaves_a_trainable_fresh_start():
    """An untrained (all-zero) adapter shrinks to PEFT's fresh shape, Kaiming A and zero B, so it still trains."""
    model = tiny_rhea(n_mem=3)
    with torch.no_grad():
        for m in _layers(model).values():
            m.lora_B["generate"].weight.zero_()
    info = model.shrink_lora_rank("generate", 1)
    assert info["energy_kept_min"] == 1.0 and info["rel_error_max"] == 0.0
    layers = list(_layers(model).values())
    assert all(m.lora_A["generate"].weight.abs().sum() > 0 and not m.lora_B["generate"].weight.any() for m in layers)
    for p in model.peft_model.parameters():
        p.requires_grad_(False)
    for m in layers:
        m.lora_B["generate"].weight.requires_grad_(True)
    ids = torch.tensor([[5, 6, 7, 8]])
    model(input_ids=ids, labels=ids).loss.backward()
    assert any(m.lora_B["generate"].weight.grad.abs().sum() > 0 for m in layers)


def test_shrink_refuses_bad_ranks():
    model = tiny_rhea(n_mem=3)
    for bad, match in ((5, "only lowers"), (0, ">= 1"), (True, ">= 1"), (1.5, ">= 1")):
        with pytest.raises(RheaConfigError, match=match):
            model.shrink_lora_rank("compress", bad)
    with pytest.raises(RheaConfigError, match="not one of"):
        model.shrink_lora_rank("decoder", 2)


def test_shrink_model_writes_a_smaller_directory_with_its_fidelity_cleared(tmp_path):
    model = tiny_rhea(n_mem=3, latent_injection="states")
    _randomize(model, "compress")
    model.config.fidelity = {"reconstruction_token_acc": 0.95, "control_gap": 0.5, "measured_on": "x", "n": 10}
    model.save_pretrained(tmp_path / "src")
    base = tiny_llama(len(tiny_tokenizer()))
    report = shrink_model(tmp_path / "src", tmp_path / "out", compress_rank=2, generate_rank=1, dtype="float16",
                          base_model=base)
    assert report["adapters"]["compress"]["rank_after"] == 2 and report["adapters"]["generate"]["rank_after"] == 1
    assert report["fidelity_of_source"]["reconstruction_token_acc"] == 0.95
    saved = json.loads((tmp_path / "out" / "rhea_config.json").read_text())
    assert saved["fidelity"] is None and saved["extra"]["shrunk"]["adapters"]["compress"]["rank_before"] == 4
    for path in (tmp_path / "out").rglob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            assert all(f.get_tensor(k).dtype == torch.float16 for k in f.keys()), path
    again = RheaForCausalLM.from_pretrained(tmp_path / "out", base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.lora_rank("compress") == 2 and again.lora_rank("generate") == 1
    assert again.config.fidelity is None
    with pytest.raises(FileExistsError, match="not empty"):
        shrink_model(tmp_path / "src", tmp_path / "out", compress_rank=2, base_model=base)


def test_shrink_model_checks_its_arguments_before_loading(tmp_path):
    for kwargs, match in (({"compress_rank": 0}, "compress_rank"), ({"generate_rank": "8"}, "generate_rank"),
                          ({"dtype": "int8"}, "not one of")):
        with pytest.raises(RheaConfigError, match=match):
            shrink_model(tmp_path / "missing", tmp_path / "out", **kwargs)
    from rhea.errors import CheckpointError

    with pytest.raises(CheckpointError, match="does not exist"):
        shrink_model(tmp_path / "missing", tmp_path / "out", compress_rank=2)
    assert not (tmp_path / "out").exists()


def test_cast_refuses_values_beyond_float16(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.tensor([1.0, 1e6])}, str(tmp_path / "w.safetensors"))
    with pytest.raises(RheaConfigError, match="range"):
        cast_safetensors(tmp_path, torch.float16)
    cast_safetensors(tmp_path, torch.bfloat16)
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        assert f.get_tensor("w").dtype == torch.bfloat16


def test_cli_shrink(tmp_path, capsys):
    from rhea.cli import main

    model = tiny_rhea(n_mem=3)
    _randomize(model, "compress")
    model.save_pretrained(tmp_path / "src")
    save_tiny_base(tmp_path / "base")  # the tiny model records no base_model
    rc = main(["shrink", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--compress-rank", "2", "--json",
               "--base-model", str(tmp_path / "base")])
    out = capsys.readouterr().out
    assert rc == 0 and "compress: rank 4 -> 2" in out and "generate: rank 4 -> 4" in out
    assert json.loads(out.strip().splitlines()[-1])["adapters"]["compress"]["rank_after"] == 2


def test_a_shrunk_copy_without_a_tokenizer_copy_loads_with_a_true_manifest(tmp_path):
    """What scripts/ship_adapters.py builds: shrunk, cast to fp16 after the save, the tokenizer as a change record;
    the manifest still matches every file and the copy loads with the source's tokenizer ids."""
    from rhea.modeling.checkpoint import TOKENIZER_CHANGES_NAME, TOKENIZER_DIR
    from rhea.modeling.manifest import read_manifest, verify_manifest
    from rhea.modeling.zoo import load_base_model

    base, tok = load_base_model(save_tiny_base(tmp_path / "base"))
    model = RheaForCausalLM.from_base(base, tok)
    _randomize(model, "compress")
    model.save_pretrained(tmp_path / "src")
    shrink_model(tmp_path / "src", tmp_path / "out", compress_rank=2, dtype="float16", tokenizer_copy=False)
    out = tmp_path / "out"
    assert (out / TOKENIZER_CHANGES_NAME).is_file() and not (out / TOKENIZER_DIR).exists()
    assert verify_manifest(out) == len(read_manifest(out)) > 5
    loaded = RheaForCausalLM.from_pretrained(out)
    text = "what color is the <mem> cat ?"
    assert loaded.tokenizer(text)["input_ids"] == model.tokenizer(text)["input_ids"]
    assert loaded.lora_rank("compress") == 2
