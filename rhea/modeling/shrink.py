"""`rhea shrink`: a Rhea directory with its LoRA adapters cut to a lower rank and stored in a smaller dtype.

A compressor trained at a high rank (r 64 on every linear layer of SmolLM2-135M is 78 MB in fp32) is
mostly a few directions per layer: the truncated SVD of each layer's update (`RheaForCausalLM.shrink_lora_rank`)
keeps them, and fp16/bf16 storage halves the file again. The source's measured fidelity does not carry
over to the shrunk model: it is cleared (so ``latent_tier="auto"`` keeps the latent tier off) until
``benchmarks/reconstruction.py --write-fidelity`` measures the shrunk directory itself.

    rhea shrink runs/compressor/latest --out shrunk --compress-rank 16 --generate-rank 1 --dtype float16
"""
from __future__ import annotations

from pathlib import Path

import torch

from rhea.errors import RheaConfigError

#: storage dtypes `shrink_model` writes (the loaded model computes in its own dtype either way)
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _check_rank(name: str, rank) -> None:
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise RheaConfigError(f"{name}={rank!r}: a LoRA rank must be an int >= 1 (or None to keep the adapter's rank)")
    if rank is not None and rank > MAX_RANK:
        raise RheaConfigError(f"{name}={str(rank)[:20]}...: a LoRA rank is at most {MAX_RANK} (and a shrink lowers it: "
                              "pass a rank below the adapter's)")


#: the largest LoRA rank `shrink_model` takes (a shrink lowers ranks; the models rhea trains use 4 to 64)
MAX_RANK = 65_536


def storage_dtype(name: str) -> torch.dtype:
    """The torch dtype for a ``--dtype`` name; a clear error for any other name."""
    if name not in STORAGE_DTYPES:
        raise RheaConfigError(f"--dtype {name!r} is not one of {sorted(STORAGE_DTYPES)}")
    return STORAGE_DTYPES[name]


def cast_safetensors(directory: str | Path, dtype: torch.dtype) -> list[Path]:
    """Rewrite every floating-point tensor of every ``*.safetensors`` under `directory` in `dtype`.

    Files keep their metadata. A value that `dtype` cannot hold (beyond float16's range, 65504) raises
    instead of being stored as inf. Returns the rewritten files."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from rhea.modeling.manifest import record_files

    directory = Path(directory)
    done = []
    for path in sorted(directory.rglob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        out = {}
        for k, v in tensors.items():
            if v.is_floating_point() and v.dtype != dtype:
                cast = v.to(dtype)
                if not torch.isfinite(cast).all() and torch.isfinite(v).all():
                    raise RheaConfigError(f"{path}: {k} has values beyond {dtype}'s range (max |x| "
                                          f"{v.abs().max().item():.4g}); store it as float32 or bfloat16")
                v = cast
            out[k] = v.contiguous()
        save_file(out, str(path), metadata=meta)
        done.append(path)
    record_files(directory, [p.relative_to(directory).as_posix() for p in done])  # the manifest keeps the new digests
    return done


def shrink_model(source: str | Path, out: str | Path, *, compress_rank: int | None = None,
                 generate_rank: int | None = None, dtype: str = "float16", base_model=None,
                 tokenizer_copy: bool = True) -> dict:
    """Write `out`: `source` (a Rhea directory or a zoo name with shipped adapters) with each named adapter cut
    to its rank and every weight file stored in `dtype`. Returns the report also recorded in
    ``rhea_config.json`` (``extra["shrunk"]``): per adapter the ranks and the share of each layer's update kept.

    ``tokenizer_copy=False`` stores the tokenizer as what it changes in the base model's (`save_pretrained`),
    the form the shipped adapters take. Everything is checked before a model is loaded: the ranks, the dtype,
    the source and that `out` is new or empty.
    """
    from rhea.modeling.export import check_export_out, resolve_export_source
    from rhea.modeling.rhea_model import RheaForCausalLM

    _check_rank("compress_rank", compress_rank)
    _check_rank("generate_rank", generate_rank)
    target = storage_dtype(dtype)
    directory, zoo_name = resolve_export_source(source)
    if directory is None:
        raise RheaConfigError(f"{zoo_name!r} has no trained adapters to shrink; pass a directory written by "
                              "save_pretrained (e.g. the final/ of a `rhea train` run)")
    out = check_export_out(out)
    model = RheaForCausalLM.from_pretrained(directory, base_model=base_model)
    report = {"source": str(source), "dtype": dtype, "adapters": {}}
    for name, rank in (("compress", compress_rank), ("generate", generate_rank)):
        if rank is None:
            report["adapters"][name] = {"rank_before": model.lora_rank(name), "rank_after": model.lora_rank(name)}
            continue
        info = model.shrink_lora_rank(name, rank)
        info.pop("adapter")
        report["adapters"][name] = {k: round(v, 6) if isinstance(v, float) else v for k, v in info.items()}
    was = model.config.fidelity
    if was is not None:
        report["fidelity_of_source"] = was
    model.config.fidelity = None  # measured on the source, not on this model: measure it again
    model.config.extra["shrunk"] = report
    model.save_pretrained(out, tokenizer_copy=tokenizer_copy)
    if target != torch.float32:
        cast_safetensors(out, target)
    return report


__all__ = ["shrink_model", "cast_safetensors", "storage_dtype", "STORAGE_DTYPES"]
