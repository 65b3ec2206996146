"""Export a Rhea model for serving: the generate adapter merged into the base, plus the compressor."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from rhea.modeling.checkpoint import INJECTOR_WEIGHTS_NAME, MEM_WEIGHTS_NAME, TOKENIZER_DIR
from rhea.modeling.rhea_model import RheaForCausalLM
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME

_README = """# Exported Rhea model

Written by `rhea export {source} --out {out}`.

* `merged/` — the base model (`{base}`) with the **generate** LoRA merged in, as plain
  safetensors, plus the tokenizer (which has the `<mem>` token). Serve it with any stack that
  loads Hugging Face causal LMs. To answer from latents, feed `inputs_embeds` in which each
  `<mem>` position holds one latent vector.
* `compress/` — the **compress** LoRA adapter (PEFT format) for the same base model.
* `mem_tokens.safetensors` — `mem_slot_embeds` (the {n_mem} compression read-out slots) and
  `mem_token_row` (the `<mem>` embedding row); with `compress_piece_embeddings` also `mem_piece_embeds`
  (one offset per piece index, added to the slots when a reply is compressed in pieces).
* `latent_injector.safetensors` (when `latent_injection` is not "raw") — the centre/projector that maps
  each latent into the embedding space before it fills a `<mem>` position. With `latent_injection`
  "deep" it also holds `layer_down`/`layer_up`: a term `(y @ layer_down[l].T) @ layer_up[l].T` of
  the projected latent `y` is added to the residual stream at each `<mem>` position at the input of
  every decoder layer `l`, which `inputs_embeds` alone cannot express: load the source with
  `RheaForCausalLM.from_pretrained` to answer from such latents. With "states" a latent is
  `[n_mem, n_layers * hidden]`: its first `hidden` columns (through the projector) fill the `<mem>`
  position, and column block `l` replaces that position's hidden state at the input of decoder layer
  `l` (1 .. n_layers-1), which needs the same hooks.
* `score_head.safetensors` (when `score_head` > 0) — the learned retrieval read-out: a linear map
  (`weight`, `bias`) from the latent blocks `score_head_layers` (block `l` = columns `l*hidden ..
  (l+1)*hidden`) to the vectors whose max cosine ranks past turns.
* `rhea_config.json` — the Rhea configuration (n_mem, thresholds, base model).

Load everything back as a trainable Rhea model from the source instead:

```python
from rhea.modeling.loading import load_rhea_model
model = load_rhea_model("{source}")
```

Or use the merged model for generation only:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{out}/merged")
tokenizer = AutoTokenizer.from_pretrained("{out}/merged")
```
"""


def resolve_export_source(source: str | Path) -> tuple[Path | None, str | None]:
    """(Rhea directory, zoo name) for `source`: a directory written by ``save_pretrained`` or a
    model-zoo name (a name with shipped adapters, `shipped_adapters`, stands for them). Raises
    before anything is loaded when `source` is neither.

    >>> resolve_export_source("smollm2-135m")[0].name
    'smollm2-135m'
    """
    from rhea.errors import CheckpointError
    from rhea.modeling.config import CONFIG_NAME
    from rhea.modeling.loading import shipped_adapters
    from rhea.modeling.zoo import MODEL_ZOO, get_model

    path = Path(source)
    if path.is_dir():
        if not (path / CONFIG_NAME).is_file():
            raise CheckpointError(
                f"{path} has no {CONFIG_NAME}, so it is not a Rhea directory; pass a directory written by "
                f"RheaForCausalLM.save_pretrained (or `rhea calibrate --out`), or a model-zoo name ({', '.join(sorted(MODEL_ZOO))})")
        return path, None
    name = str(source)
    shipped = shipped_adapters(name)
    if shipped is not None:
        return shipped, None
    if name in MODEL_ZOO:
        return None, name
    if path.exists():
        raise CheckpointError(f"{path} is a file, not a directory; pass the folder written by save_pretrained()")
    if "/" in name or os.sep in name or name.startswith("."):
        raise CheckpointError(f"{path} does not exist; pass an existing Rhea directory or a model-zoo name "
                              f"({', '.join(sorted(MODEL_ZOO))})")
    get_model(name)  # UnknownModelError with the known names (and a close match)
    raise AssertionError("unreachable")  # pragma: no cover


def check_export_out(out: str | Path) -> Path:
    """`out` as a Path, refused with a `StorageError` unless it is a new or empty directory this process can
    write (`OutputNotEmptyError` when it holds files); nothing is written."""
    from rhea.storage import OutputNotEmptyError, StorageError, check_writable_directory

    if not str(out).strip():
        raise StorageError("--out is empty; pass the path of a new (or empty) directory to write into")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StorageError(f"--out {out} is a file, not a directory; pass the path of a new (or empty) directory to "
                           "write into")
    if out.exists() and any(out.iterdir()):
        raise OutputNotEmptyError(f"--out {out} exists and is not empty; choose a new --out directory or remove it")
    return check_writable_directory(out, "--out")  # under a file, read-only, no permission


def export_model(source: str | Path, out: str | Path, *, base_model=None) -> Path:
    """Write ``out/merged`` (generate adapter merged, safetensors), ``out/compress``, the `<mem>` rows and a README.

    `source`: a directory written by ``save_pretrained`` or a model-zoo name (a name with shipped
    adapters, such as ``smollm2-135m``, exports them; one without gets fresh, untrained adapters).
    Both `source` and `out` are checked before any model is loaded.
    """
    import tempfile

    directory, zoo_name = resolve_export_source(source)
    out = check_export_out(out)
    with tempfile.TemporaryDirectory(prefix="rhea-export-") as tmp:
        if directory is None:  # a zoo model without shipped adapters: save fresh ones first
            from rhea.modeling.loading import load_rhea_model

            model = load_rhea_model(zoo_name)
            directory = Path(tmp) / zoo_name
            model.save_pretrained(directory)
            if base_model is not None:
                model = RheaForCausalLM.from_pretrained(directory, base_model=base_model)
        else:
            model = RheaForCausalLM.from_pretrained(directory, base_model=base_model)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(directory / "compress", out / "compress")
        shutil.copy2(directory / MEM_WEIGHTS_NAME, out / MEM_WEIGHTS_NAME)
        shutil.copy2(directory / "rhea_config.json", out / "rhea_config.json")
        for name in (INJECTOR_WEIGHTS_NAME, SCORE_HEAD_WEIGHTS_NAME):
            if (directory / name).is_file():
                shutil.copy2(directory / name, out / name)
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


__all__ = ["export_model", "resolve_export_source", "check_export_out", "TOKENIZER_DIR"]
