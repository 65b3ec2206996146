"""`rhea export`: a Rhea directory or a model-zoo name, merged for serving."""
from __future__ import annotations


def _cmd_export(args) -> int:
    from rhea.modeling.export import export_model

    out = export_model(args.directory, args.out, base_model=args.base_model)
    print(f"exported to {out}")
    return 0


def register(sub) -> None:
    export = sub.add_parser("export", help="merge the generate adapter into the base model for serving")
    export.add_argument("directory", help="a directory written by RheaForCausalLM.save_pretrained, or a model-zoo "
                        "name (one with shipped trained adapters, such as smollm2-135m, exports them)")
    export.add_argument("--out", required=True, help="output directory (must be new or empty)")
    export.add_argument("--base-model", default=None, help="override the base model recorded in rhea_config.json")
    export.set_defaults(func=_cmd_export)
