"""The `rhea chat` REPL: one turn per line, with the decision trace of every turn.

Commands: /save DIR, /load DIR, /policy NAME, /im, /trace, /help, /quit.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from typing import Callable, Iterable

from rhea.errors import RheaError
from rhea.session.chat import ChatSession

HELP = """commands:
  /save DIR      save the session (conversation, policy state, latents)
  /load DIR      load a saved session
  /policy NAME   switch context policy (the new one catches up on the turns so far)
  /im            show the instructional memory
  /trace         the last turn's decisions: instruction block, each past turn's tier/score/reason, tokens
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
                 + (f" ({reused} prompt tokens from the last turn's cache)" if reused else "")
                 + f", decode {t['decode_s']:.2f}s ({rec.new_tokens} tok), compress reply {t['observe_s']:.2f}s")
    for r in plan.decisions.records:
        replan = r.get("replan") if isinstance(r, dict) else None
        if replan:
            lines.append(f"  plan: {'made now (' + replan['why'] + ')' if replan['fresh'] else 'kept'} from turn "
                         f"{replan['planned_at']}, re-planned every {replan['every']} turns")
        warn = r.get("scores", {}).get("warning") if isinstance(r, dict) else None
        if warn:
            lines.append(f"  WARNING: {warn}")
    return "\n".join(lines)


_LONG_FLOAT = re.compile(r"-?\d+\.\d{4,}")


def _short_floats(text: str) -> str:
    """Round the long floats in a policy's free-text note to 3 decimals."""
    return _LONG_FLOAT.sub(lambda m: f"{float(m.group(0)):.3f}", text)


def format_trace(chat: ChatSession) -> str:
    """The last turn's decisions as a readable table: what the recognizer did with the message,
    the instruction block the model saw, one row per past turn (tier, score, reason), and the
    tokens fed against the full history. What `/trace` prints."""
    plan = chat.last_plan
    if plan is None or not chat.records:
        return "(no turn yet)"
    rec, d = chat.records[-1], plan.decisions
    lines = [f"trace of turn {rec.turn} (policy {rec.policy})"]
    for r in d.records:
        if not isinstance(r, dict) or "recognizer" not in r:
            continue
        g = r["recognizer"]
        how = g.get("source") + (f', matched "{g["matched"]}"' if g.get("matched") else "") + (
            f", p={g['confidence']:.2f}" if g.get("confidence") is not None else "")
        lines.append(f"  message: {'global instruction' if g['kind'] == 'add' else 'revocation' if g['kind'] == 'revoke' else 'not an instruction'} ({how})")
        for e in r.get("im_events", []):
            lines.append(f"    instruction {e['action']}: {e['text']!r}")
    if d.instructions:
        lines.append(f"  instruction block ({len(d.instructions)}):")
        lines.extend(f"    {i}. {text}" for i, text in enumerate(d.instructions, 1))
    elif getattr(chat.policy, "im", None) is not None:
        lines.append("  instruction block: (empty)")
    if d.turns:
        lines.append(f"  {'turn':>4}  {'tier':<6}  {'score':>6}  reason")
        for t in d.turns:
            score = f"{t.score:6.3f}" if t.score is not None else f"{'-':>6}"
            lines.append(f"  {t.turn:>4}  {t.tier:<6}  {score}  {_short_floats(t.note)}".rstrip())
    else:
        lines.append("  (no past turns)")
    led = plan.ledger
    fed = led.text_tokens + led.latent_slots
    full = rec.full_history_tokens
    saved = f", {full - fed} saved ({(full - fed) / full:.0%})" if full and fed <= full else ""
    lines.append(f"  tokens: {led.text_tokens} text + {led.latent_slots} latent slots = {fed} vs {full} with the full "
                 f"history{saved}; prompt with the chat template {rec.prompt_tokens}")
    budget = next((r for r in reversed(d.records) if isinstance(r, dict) and r.get("event") == "budget"), None)
    if budget is not None:
        gave = (f"; to fit, dropped {len(budget['dropped'])} and cut {len(budget['cut'])} past turns"
                if budget["dropped"] or budget["cut"] else "")
        lines.append(f"  budget: {budget['rendered_tokens']} of {budget['prompt_tokens']} prompt tokens (window "
                     f"{budget['window']} - max_new_tokens {budget['max_new_tokens']}){gave}")
    for r in d.records:
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
                    try:
                        chat = (load_session or (lambda p: ChatSession.load(p, chat.model)))(arg or "rhea-session")
                    except (RheaError, ValueError, OSError) as e:
                        echo(f"error: {e}\n(nothing loaded: the current conversation of {len(chat.conversation)} "
                             "turns is kept; /save it before another /load)")
                        continue
                    echo(f"loaded {len(chat.conversation)} turns, policy {chat.policy.name}")
                elif cmd == "/policy":
                    chat.set_policy(arg)
                    echo(f"policy: {chat.policy.name}")
                elif cmd == "/im":
                    im = getattr(chat.policy, "im", None)
                    echo(im.render() or "(instructional memory is empty)" if im is not None
                         else f"policy {chat.policy.name} keeps no instructional memory")
                elif cmd == "/trace":
                    echo(format_trace(chat))
                else:
                    echo(f"unknown command {cmd}; /help lists them")
            except (RheaError, ValueError, OSError) as e:
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


#: `rhea chat` options that go to the policy's constructor (each applies to the policies whose
#: constructor takes it: the policy classes say so themselves).
POLICY_OPTIONS = ("tau_low", "tau_high", "scorer", "tier_mode", "max_raw", "max_latent", "recent_raw", "replan_every",
                  "replan_top", "replan_hidden", "latent_tier")


def policy_options(args) -> dict:
    """The policy options given on the command line, checked against the policy before any model loads.

    An option the chosen policy does not take is a named error, not silently dropped.
    """
    import inspect

    from rhea.errors import RheaConfigError
    from rhea.policies import policy_class

    given = {k: getattr(args, k, None) for k in POLICY_OPTIONS}
    given = {k: v for k, v in given.items() if v is not None}
    accepted = inspect.signature(policy_class(args.policy).__init__).parameters
    unknown = [k for k in given if k not in accepted]
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise RheaConfigError(f"{flags} do(es) not apply to policy {args.policy!r}: drop {flags}, or choose a policy "
                              "that takes it (`rhea chat --policy rhea`)")
    return given


def run_repl(args) -> int:
    from rhea.modeling.loading import load_rhea_model

    kwargs = policy_options(args)
    model = load_rhea_model(args.model, device=args.device)
    chat = ChatSession(model, policy=args.policy, max_new_tokens=args.max_new_tokens, policy_kwargs=kwargs)
    print(f"rhea chat on {args.model} (policy {args.policy}); /help for commands", file=sys.stderr)
    if callable(getattr(chat.policy, "retrieval_mode", None)):
        from rhea.memory.scoring import mode_line

        config_fields = {f.name for f in dataclasses.fields(model.config)}
        print(mode_line(dataclasses.replace(model.config, **{k: v for k, v in kwargs.items() if k in config_fields})),
              file=sys.stderr)
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
