"""`rhea export`: a Rhea directory or a model-zoo name, merged for serving; `rhea shrink`: its adapters at a lower rank."""
from __future__ import annotations


def _cmd_export(args) -> int:
    from rhea.modeling.export import export_model

    out = export_model(args.directory, args.out, base_model=args.base_model)
    print(f"exported to {out}")
    return 0


def _cmd_shrink(args) -> int:
    import json

    from rhea.modeling.shrink import shrink_model

    report = shrink_model(args.directory, args.out, compress_rank=args.compress_rank,
                          generate_rank=args.generate_rank, dtype=args.dtype, base_model=args.base_model,
                          tokenizer_copy=not args.no_tokenizer_copy)
    for name, info in report["adapters"].items():
        line = f"{name}: rank {info['rank_before']} -> {info['rank_after']}"
        if "energy_kept_min" in info:
            line += (f", update kept {info['energy_kept_mean']:.4f} mean / {info['energy_kept_min']:.4f} worst layer "
                     f"(relative error <= {info['rel_error_max']:.4f})")
        print(line)
    print(f"wrote {args.out} ({args.dtype}); its fidelity is unmeasured until "
          f"benchmarks/reconstruction.py --adapters {args.out} --write-fidelity")
    if args.json:
        print(json.dumps(report))
    return 0


def register(sub) -> None:
    export = sub.add_parser("export", help="merge the generate adapter into the base model for serving")
    export.add_argument("directory", help="a directory written by RheaForCausalLM.save_pretrained, or a model-zoo "
                        "name (one with shipped trained adapters, such as smollm2-135m, exports them)")
    export.add_argument("--out", required=True, help="output directory (must be new or empty)")
    export.add_argument("--base-model", default=None, help="override the base model recorded in rhea_config.json")
    export.set_defaults(func=_cmd_export)

    shrink = sub.add_parser("shrink", help="cut a Rhea directory's LoRA adapters to a lower rank (truncated SVD) "
                            "and store them in a smaller dtype")
    shrink.add_argument("directory", help="a directory written by RheaForCausalLM.save_pretrained")
    shrink.add_argument("--out", required=True, help="output directory (must be new or empty)")
    shrink.add_argument("--compress-rank", type=int, default=None, help="new rank of the compress adapter "
                        "(default: keep)")
    shrink.add_argument("--generate-rank", type=int, default=None, help="new rank of the generate adapter "
                        "(default: keep; 1 for an untrained, all-zero generate adapter)")
    shrink.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"],
                        help="storage dtype of the written weights (default float16)")
    shrink.add_argument("--base-model", default=None, help="override the base model recorded in rhea_config.json")
    shrink.add_argument("--no-tokenizer-copy", action="store_true", help="store the tokenizer as what it changes in "
                        "the base model's (tokenizer_changes.json), as the shipped adapters do, not as a full copy")
    shrink.add_argument("--json", action="store_true", help="also print the report as JSON")
    shrink.set_defaults(func=_cmd_shrink)
