"""`rhea chat`: the scripted demo (`--demo`) or an interactive REPL."""
from __future__ import annotations

import sys


def _cmd_chat(args) -> int:
    if args.demo:
        from rhea.session.demo import run_demo

        run_demo(args.model, max_new_tokens=args.max_new_tokens or 32, device=args.device)
        return 0
    if args.max_new_tokens is None:
        args.max_new_tokens = 96
    from rhea.session.repl import run_repl

    return run_repl(args)


def register(sub) -> None:
    from rhea.constants import DEFAULT_POLICY
    from rhea.modeling.loading import add_device_argument, add_threads_argument

    chat = sub.add_parser("chat", help="chat with a model under a context policy (or --demo)")
    chat.add_argument("--demo", action="store_true", help="run the scripted demo conversation and exit")
    chat.add_argument("--model", default="smollm2-135m", help="model-zoo name, Rhea directory, local path, or cached HF id")
    add_device_argument(chat)
    chat.add_argument("--policy", default=DEFAULT_POLICY,
                      help=f"context policy: any registered name (default {DEFAULT_POLICY}; `rhea bench --policies all` runs them all)")
    chat.add_argument("--tau-low", type=float, default=None, help="HCR drop threshold (default: the model's config)")
    chat.add_argument("--tau-high", type=float, default=None, help="HCR raw-text threshold (default: the model's config)")
    chat.add_argument("--max-new-tokens", type=int, default=None, help="reply length cap (default 96; 32 with --demo)")
    add_threads_argument(chat)
    chat.set_defaults(func=_cmd_chat)
