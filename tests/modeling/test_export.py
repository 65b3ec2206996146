import pytest
import torch
from transformers import AutoModelForCausalLM

from rhea.modeling.export import export_model
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def test_export_merged_matches_generate_adapter(tmp_path):
    model = tiny_rhea()
    model.save_pretrained(tmp_path / "src")
    out = export_model(tmp_path / "src", tmp_path / "out", base_model=tiny_llama(len(tiny_tokenizer())))
    for name in ("merged/config.json", "merged/model.safetensors", "compress/adapter_config.json",
                 "mem_tokens.safetensors", "rhea_config.json", "README.md"):
        assert (out / name).exists(), name
    merged = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    ids = torch.tensor([[7, 8, 9, 10]])
    with torch.no_grad():
        a = model(ids).logits
        b = merged(ids).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(FileExistsError, match="not empty"):
        export_model(tmp_path / "src", tmp_path / "out", base_model=tiny_llama(len(tiny_tokenizer())))
