"""`rhea` console script: chat, export (bench/train/calibrate arrive with their modules)."""
from __future__ import annotations

import argparse
import sys


def _cmd_chat(args) -> int:
    if args.demo:
        from rhea.demo import run_demo

        run_demo(args.model, max_new_tokens=args.max_new_tokens)
        return 0
    print("rhea chat: the interactive REPL is not available yet; run `rhea chat --demo`", file=sys.stderr)
    return 2


def _cmd_export(args) -> int:
    from rhea.modeling.export import export_model

    out = export_model(args.directory, args.out, base_model=args.base_model)
    print(f"exported to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rhea", description="Long multi-turn conversations for Hugging Face LLMs.")
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="chat with a model under a context policy")
    chat.add_argument("--demo", action="store_true", help="run the scripted demo conversation and exit")
    chat.add_argument("--model", default="smollm2-135m", help="model-zoo name, local path, or cached HF id")
    chat.add_argument("--max-new-tokens", type=int, default=48)
    chat.set_defaults(func=_cmd_chat)

    export = sub.add_parser("export", help="merge the generate adapter into the base for serving")
    export.add_argument("directory", help="a directory written by RheaForCausalLM.save_pretrained")
    export.add_argument("--out", required=True, help="output directory (must be new or empty)")
    export.add_argument("--base-model", default=None, help="override the base model recorded in rhea_config.json")
    export.set_defaults(func=_cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as e:  # one clear line for the user's mistakes; full traceback for ours
        from rhea.errors import RheaError

        if isinstance(e, (RheaError, FileExistsError)):
            print(f"rhea {args.command}: error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
