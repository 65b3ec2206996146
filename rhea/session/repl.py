"""The `rhea chat` REPL: one turn per line, with the decision trace of every turn.

Commands: /save DIR, /load DIR, /policy NAME, /im, /trace, /help, /quit.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Callable, Iterable

from rhea.session.chat import ChatSession

HELP = """commands:
  /save DIR      save the session (conversation, policy state, latents)
  /load DIR      load a saved session
  /policy NAME   switch context policy (the new one catches up on the turns so far)
  /im            show the instructional memory
  /trace         show the last turn's full decision trace
  /help          this text
  /quit          leave"""


def format_turn_trace(chat: ChatSession) -> str:
    """Per turn: IM contents, each past turn's tier and score, tokens fed vs full history, latency split."""
    plan, rec = chat.last_plan, chat.records[-1]
    lines = [f"  policy={rec.policy}  turn={rec.turn}"]
    if plan.decisions.instructions:
        lines.append("  IM: " + " | ".join(plan.decisions.instructions))
    if plan.decisions.turns:
        lines.append("  turns: " + "  ".join(
            f"#{d.turn}:{d.tier}" + (f"({d.score:.2f})" if d.score is not None else "") for d in plan.decisions.turns))
    full = rec.full_history_tokens
    fed = plan.ledger.text_tokens + plan.ledger.latent_slots
    lines.append(f"  tokens fed {fed} ({plan.ledger.text_tokens} text + {plan.ledger.latent_slots} latent slots) "
                 f"vs full history {full}; prompt incl. template {rec.prompt_tokens}")
    t = rec.timings
    reused = int(t.get("prefix_reused_tokens", 0))
    lines.append(f"  latency: plan {t['plan_s']:.2f}s (compress+score), prefill {t['prefill_s']:.2f}s"
                 + (f" ({reused} instruction-block tokens from cache)" if reused else "")
                 + f", decode {t['decode_s']:.2f}s ({rec.new_tokens} tok), compress reply {t['observe_s']:.2f}s")
    for r in plan.decisions.records:
        warn = r.get("scores", {}).get("warning") if isinstance(r, dict) else None
        if warn:
            lines.append(f"  WARNING: {warn}")
    return "\n".join(lines)


def repl(chat: ChatSession, lines: Iterable[str], write: Callable[[str], None],
         load_session: Callable[[str], ChatSession] | None = None) -> ChatSession:
    """Drive a session from `lines` (stdin in the CLI; a list in tests), writing raw text to `write`.

    Replies stream piece by piece. Returns the final session (``/load`` replaces it).
    """
    def echo(text: str) -> None:
        write(text + "\n")

    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("/"):
            cmd, _, arg = line.partition(" ")
            arg = arg.strip()
            try:
                if cmd in ("/quit", "/exit"):
                    break
                elif cmd == "/help":
                    echo(HELP)
                elif cmd == "/save":
                    echo(f"saved to {chat.save(arg or 'rhea-session')}")
                elif cmd == "/load":
                    chat = (load_session or (lambda p: ChatSession.load(p, chat.model)))(arg or "rhea-session")
                    echo(f"loaded {len(chat.conversation)} turns, policy {chat.policy.name}")
                elif cmd == "/policy":
                    chat.set_policy(arg)
                    echo(f"policy: {chat.policy.name}")
                elif cmd == "/im":
                    im = getattr(chat.policy, "im", None)
                    echo(im.render() or "(instructional memory is empty)" if im is not None
                         else f"policy {chat.policy.name} keeps no instructional memory")
                elif cmd == "/trace":
                    echo(repr(chat.last_plan.decisions) if chat.last_plan else "(no turn yet)")
                else:
                    echo(f"unknown command {cmd}; /help lists them")
            except (ValueError, OSError) as e:
                echo(f"error: {e}")
            continue
        try:
            write("assistant> ")
            for piece in chat.stream(line):
                write(piece)
            write("\n")
            echo(format_turn_trace(chat))
        except ValueError as e:
            echo(f"error: {e}")
    return chat


def run_repl(args) -> int:
    from rhea.modeling.loading import load_rhea_model

    model = load_rhea_model(args.model, device=args.device)
    kwargs = {k: getattr(args, k, None) for k in ("tau_low", "tau_high", "scorer", "tier_mode", "max_raw", "max_latent",
                                                   "latent_tier")}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if not args.policy.startswith("rhea"):
        kwargs = {k: v for k, v in kwargs.items() if k in ("tau_low", "tau_high")}
    chat = ChatSession(model, policy=args.policy, max_new_tokens=args.max_new_tokens, policy_kwargs=kwargs)
    print(f"rhea chat on {args.model} (policy {args.policy}); /help for commands", file=sys.stderr)
    if args.policy.startswith("rhea"):
        from rhea.memory.scoring import mode_line

        print(mode_line(dataclasses.replace(model.config, **kwargs)), file=sys.stderr)
    if not model.adapters_trained:
        print("note: this model's compress/generate adapters are untrained", file=sys.stderr)

    def lines():
        while True:
            try:
                yield input("you> ")
            except EOFError:
                return

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    repl(chat, lines(), write)
    return 0
