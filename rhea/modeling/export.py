"""Export a Rhea model for serving: the generate adapter merged into the base, plus the compressor."""
from __future__ import annotations

import shutil
from pathlib import Path

from rhea.modeling.rhea_model import MEM_WEIGHTS_NAME, TOKENIZER_DIR, RheaForCausalLM

_README = """# Exported Rhea model

Written by `rhea export {source} --out {out}`.

* `merged/` — the base model (`{base}`) with the **generate** LoRA merged in, as plain
  safetensors, plus the tokenizer (which has the `<mem>` token). Serve it with any stack that
  loads Hugging Face causal LMs. To answer from latents, feed `inputs_embeds` in which each
  `<mem>` position holds one latent vector.
* `compress/` — the **compress** LoRA adapter (PEFT format) for the same base model.
* `mem_tokens.safetensors` — `mem_slot_embeds` (the {n_mem} compression read-out slots) and
  `mem_token_row` (the `<mem>` embedding row).
* `rhea_config.json` — the Rhea configuration (n_mem, thresholds, base model).

Load everything back as a trainable Rhea model from the source directory instead:

```python
from rhea import RheaForCausalLM
model = RheaForCausalLM.from_pretrained("{source}")
```

Or use the merged model for generation only:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{out}/merged")
tokenizer = AutoTokenizer.from_pretrained("{out}/merged")
```
"""


def export_model(source: str | Path, out: str | Path, *, base_model=None) -> Path:
    """Write ``out/merged`` (generate adapter merged, safetensors), ``out/compress``, the `<mem>` rows and a README."""
    source, out = Path(source), Path(out)
    model = RheaForCausalLM.from_pretrained(source, base_model=base_model)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; choose a new --out directory or remove it")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source / "compress", out / "compress")
    shutil.copy2(source / MEM_WEIGHTS_NAME, out / MEM_WEIGHTS_NAME)
    shutil.copy2(source / "rhea_config.json", out / "rhea_config.json")
    peft_model = model.peft_model
    peft_model.base_model.set_adapter("generate")  # so deleting compress leaves a clean active adapter
    peft_model.delete_adapter("compress")
    merged = peft_model.merge_and_unload(adapter_names=["generate"])
    merged.save_pretrained(out / "merged", safe_serialization=True)
    model.tokenizer.save_pretrained(out / "merged")
    (out / "README.md").write_text(
        _README.format(source=source, out=out, base=model.config.base_model, n_mem=model.config.n_mem)
    )
    return out


__all__ = ["export_model", "TOKENIZER_DIR"]
