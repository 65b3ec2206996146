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


def retrieval_mode_line(model: str) -> str | None:
    """The retrieval mode a model's Rhea policy runs, and why, read from its rhea_config.json without loading it.

    None when `model` is neither a Rhea directory nor a zoo name with shipped adapters.
    """
    from pathlib import Path

    from rhea.memory.scoring import mode_line
    from rhea.modeling.config import CONFIG_NAME, RheaConfig
    from rhea.modeling.loading import shipped_adapters

    path = shipped_adapters(model) or Path(model)
    if not (path / CONFIG_NAME).is_file():
        return None
    return mode_line(RheaConfig.load(path))


def register(sub) -> None:
    from rhea.constants import DEFAULT_POLICY
    from rhea.modeling.config import REPLAN_HIDDEN
    from rhea.modeling.loading import add_device_argument, add_threads_argument, cosine_threshold, int_at_least

    chat = sub.add_parser("chat", help="chat with a model under a context policy (or --demo)")
    chat.add_argument("--demo", action="store_true", help="run the scripted demo conversation and exit")
    chat.add_argument("--model", default="smollm2-135m", help="model-zoo name, Rhea directory, local path, or cached HF id")
    add_device_argument(chat)
    chat.add_argument("--policy", default=DEFAULT_POLICY,
                      help=f"context policy: any registered name (default {DEFAULT_POLICY}; `rhea bench --policies all` runs them all)")
    chat.add_argument("--tau-low", type=cosine_threshold, default=None, help="HCR drop threshold (default: the model's config)")
    chat.add_argument("--tau-high", type=cosine_threshold, default=None, help="HCR raw-text threshold (default: the model's config)")
    chat.add_argument("--scorer", choices=["latent", "bm25", "dense", "fused"], default=None,
                      help="how the rhea policy ranks past turns (default: the model's config)")
    chat.add_argument("--tier-mode", choices=["threshold", "budget"], default=None,
                      help="threshold (the paper's HCR) or budget (at most --max-raw raw and --max-latent latent turns)")
    chat.add_argument("--max-raw", type=int_at_least(0, "turns kept as raw text"), default=None)
    chat.add_argument("--max-latent", type=int_at_least(0, "turns kept as latents"), default=None)
    chat.add_argument("--recent-raw", type=int_at_least(0, "latest turns always kept as raw text"), default=None,
                      help="keep the last N turns raw whatever their scores (default: the model's config)")
    chat.add_argument("--replan-every", type=int_at_least(1, "turns between re-plans"), default=None,
                      help="re-decide the earlier turns' tiers every N turns, appending new turns raw in between, so the "
                           "prompt only grows and its KV cache is reused (default: the model's config, else 8; "
                           "1 = every turn, the paper's rule)")
    chat.add_argument("--replan-top", type=int_at_least(0, "best turns checked against a kept plan"), default=None,
                      help="with --replan-every: the query's N best turns that the kept plan hides are recalled after "
                           "the newest turn, or force a fresh plan (--replan-hidden; default: the model's config; 0 = never)")
    chat.add_argument("--replan-hidden", choices=REPLAN_HIDDEN, default=None,
                      help="with --replan-every: show hidden best turns again before the query (recall) or re-plan now")
    chat.add_argument("--latent-tier", choices=["auto", "on", "off"], default=None,
                      help="auto: latents only when the compressor's recorded fidelity meets the target; on: always")
    chat.add_argument("--max-new-tokens", type=int_at_least(1, "reply length cap in tokens"), default=None, help="reply length cap (default 96; 32 with --demo)")
    add_threads_argument(chat)
    chat.set_defaults(func=_cmd_chat)
