"""`rhea chat --demo` (what `make demo` runs): Rhea's mechanisms in one scripted conversation.

A `ChatSession` under the ``rhea`` policy on the embedded model with its shipped adapters:
nothing here re-implements a step of the policy, the demo only reads what the session decided.
The script shows, turn by turn,

* a global instruction ("call me Captain") captured into the instruction block;
* the instruction at work: asked "what do you call me?", the model answers from the block
  although the instruction's own turn was dropped from the history;
* a revocation taking it out of the block;
* a related turn (a title the model made up, which nothing else in the conversation holds) kept as
  `<mem>` latents and used by the follow-up that asks for it back, while the unrelated turns are
  dropped; the same follow-up asked without any history (the control) shows the model cannot
  answer it from what it knows;
* the tokens fed to the model against the full history.

The 135M model follows few instructions; "call me X" is one it visibly does, and the check is
printed either way. Each decision is printed with its margin to the nearest threshold, so a
decision that hangs on a hair shows as such.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

from rhea.constants import DEFAULT_POLICY


@dataclass(frozen=True)
class Step:
    """One scripted user message and what it is there to show."""

    user: str
    shows: str


NAME = "Captain"
# The policy settings the demo runs (see run_demo): HCR's threshold rule alone (drop under a floor, raw over a
# ceiling, latents between), without the window of recent turns the default adds (a six-turn script would keep
# every turn raw under it), so each tier shows. The score is the library's dense one (MiniLM cosine of the query and
# the turn's text): the shipped compressor is trained to carry a reply, and its own latents rank related turns
# worse than that (docs/guides/calibration.md). Floor and ceiling are the demo's: with the library's (0.05 / 0.6) the
# six-turn script keeps every turn, and the follow-up's turn as text.
# The latent tier is on whatever the compressor's measured fidelity: the demo is there to show it. Under the default
# (latent_tier="auto") a compressor below the fidelity target keeps such turns as text; the demo prints which applies.
# Every query re-decides every earlier turn's tier (replan_every=1, the paper's rule): the library's default keeps a
# plan up to 8 turns, and a kept plan shows a turn the query needs only when its fresh plan would show it raw.
DEMO_POLICY = {"scorer": "dense", "tier_mode": "threshold", "recent_raw": 0, "dense_floor": 0.5, "dense_high": 0.9,
               "latent_tier": "on", "replan_every": 1}
SCRIPT = (
    Step(f"From now on, call me {NAME}.", "a global instruction: it goes into the instruction block"),
    Step("Make up a title for my mystery novel.", "the model invents something only this turn holds"),
    Step("How many legs does a spider have?", "an unrelated turn"),
    Step("What do you call me?", "the instruction at work: its own turn is dropped, the block still holds it"),
    Step(f"Stop calling me {NAME}.", "a revocation: the instruction leaves the block"),
    Step("Repeat the title you made up for my novel.",
         "the related turn is kept as latents and used, the unrelated turns are dropped"),
)
INSTRUCTION, FACT, UNRELATED, PROBE, REVOKE, FOLLOW_UP = range(len(SCRIPT))
#: a decision closer than this to a threshold is flagged: it could flip on another machine
NARROW_MARGIN = 0.02


def margin(score: float | None, tier: str, tau_low: float | None, tau_high: float | None) -> float | None:
    """How far `score` is inside its tier: the distance to the nearest threshold that would change it.

    >>> round(margin(0.5, "latent", 0.4, 0.7), 3)
    0.1
    >>> round(margin(0.1, "drop", 0.4, 0.7), 3)
    0.3
    >>> round(margin(0.5, "raw", 0.4, 0.7), 3)   # raw in the latent band: the latent tier is off
    0.1
    """
    if score is None or tau_low is None or tau_high is None:
        return None
    if tier == "drop":
        return tau_low - score
    if tier == "raw":  # over the ceiling; or, with the latent tier off, in the band it would take
        return score - tau_high if score >= tau_high else score - tau_low
    return min(score - tau_low, tau_high - score)


def demo_thresholds(policy) -> tuple[float | None, float | None, str]:
    """(floor, ceiling, what is scored) of the threshold rule `policy` applies to its single scorer component:
    the calibrated tau_low / tau_high for the compressor's latent scores, dense_floor / dense_high for MiniLM's."""
    components = getattr(policy, "components", ())
    if components == ("dense",):
        return policy.rule.dense_floor, policy.rule.dense_high, "the dense score (MiniLM cosine of query and turn)"
    if components == ("latent",):
        return policy.tau_low, policy.tau_high, "the compressor's latent scores (thresholds from `rhea calibrate`)"
    return None, None, "+".join(components)


def _answer_words(question: str, reply: str) -> list[str]:
    """Capitalised words of `reply` that the question did not contain: what a follow-up asking
    for the reply's content should repeat ("Osaka" in "The capital of Japan is called Osaka.").

    >>> _answer_words("What is the capital of Japan?", "The capital of Japan is called Osaka.")
    ['Osaka']
    """
    asked = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
    words = re.findall(r"\b[A-Z][a-z]+\b", reply)
    return [w for w in dict.fromkeys(words) if w.lower() not in asked and w not in _NOT_CONTENT]


#: capitalised words that start sentences rather than name anything
_NOT_CONTENT = frozenset({"The", "It", "I", "A", "An", "In", "But", "And", "So", "This", "That", "Yes", "No", "As",
                          "Here", "There", "If", "You", "Your", "My", "We", "They", "He", "She", "Of", "On", "At"})


def _load(model_name: str, device: str):
    from rhea.modeling.loading import load_rhea_model
    from rhea.modeling.zoo import MODEL_ZOO, cache_dir

    cached = (cache_dir() / "models" / model_name / "rhea_cache.json").is_file() if model_name in MODEL_ZOO else None
    t0 = time.perf_counter()
    model = load_rhea_model(model_name, device=device)
    where = ("from the safetensors cache" if cached else "first load: GGUF dequantized and cached" if cached is False
             else "from disk")
    return model, time.perf_counter() - t0, where


def run_demo(model_name: str = "smollm2-135m", *, max_new_tokens: int = 32, echo: Callable[[str], None] = print,
             device: str = "cpu", model=None) -> dict:
    """Run the scripted conversation; print each turn's decisions and a closing checklist
    through `echo`; return what was decided (the checks, per-turn tiers/scores/margins, tokens).

    `model`: an already loaded `RheaForCausalLM` (then `model_name` and `device` only label it).
    """
    from rhea.session.chat import ChatSession
    from rhea.session.repl import format_trace
    from rhea.policies.rhea_policy import is_retired

    t_start = time.perf_counter()
    load_s, where = 0.0, "given"
    if model is None:
        model, load_s, where = _load(model_name, device)
    model.eval()
    echo(f"== rhea demo: {model_name}, policy {DEFAULT_POLICY}, loaded in {load_s:.1f}s ({where}) ==")
    if not model.adapters_trained:
        echo("NOTE: this model's compress/generate adapters are UNTRAINED: its scores and latents are noise.")
    # The paper's HCR: the compressor's latent scores against the calibrated thresholds, so each decision
    # has a margin to show. The library's default ranks turns by fused MiniLM + BM25 under a raw-turn budget
    # (docs/reports/quality.md, "Retrieval"); on a six-turn chat a budget keeps everything, so the demo would show nothing.
    chat = ChatSession(model, policy=DEFAULT_POLICY, max_new_tokens=max_new_tokens, policy_kwargs=DEMO_POLICY)
    policy = chat.policy
    tau_low, tau_high, scored = demo_thresholds(policy)
    if tau_low is not None:
        latent = (f"kept as {model.n_mem} <mem> latents" if policy.latents_on else
                  f"kept as text too ({policy.latent_tier_reason})")
        echo(f"HCR's tier rule (tier_mode=threshold) on {scored}, re-decided every turn; the library's default is a"
             f" budget over fused MiniLM + BM25, re-planned every {model.config.replan_every} turns: past turns"
             f" scoring below {tau_low:.3f} are dropped, above {tau_high:.3f} kept as text, in between {latent}")
        from rhea.modeling.config import latent_tier_active

        auto_on, auto_reason = latent_tier_active("auto", model.config.fidelity)
        if policy.latents_on and not auto_on:
            echo(f"NOTE: the demo turns the latent tier on to show it; by default (latent_tier=auto) those turns stay"
                 f" text, {auto_reason.split(': ', 1)[-1]}")
    echo("")

    turns, blocks = [], []
    for i, step in enumerate(SCRIPT):
        reply = chat.send(step.user)
        plan, rec = chat.last_plan, chat.records[-1]
        decisions = [{"turn": d.turn, "tier": d.tier, "score": d.score, "retired": is_retired(d),
                      "margin": None if is_retired(d) else margin(d.score, d.tier, tau_low, tau_high)}
                     for d in plan.decisions.turns]
        events = [e for r in plan.decisions.records if isinstance(r, dict) for e in r.get("im_events", [])]
        blocks.append(list(plan.decisions.instructions))
        fed = rec.content_tokens if rec.content_tokens is not None else rec.prompt_tokens
        turns.append({"user": step.user, "reply": reply, "decisions": decisions, "instructions": blocks[-1],
                      "im_events": [(e["action"], e["text"]) for e in events], "tokens": fed,
                      "full_history_tokens": rec.full_history_tokens, "latent_slots": rec.latent_slots,
                      "seconds": sum(rec.timings.get(k, 0.0) for k in ("plan_s", "prefill_s", "decode_s", "observe_s"))})
        echo(f"[{i}] you>  {step.user}        ({step.shows})")
        echo(f"    rhea> {reply}")
        for action, text in turns[-1]["im_events"]:
            echo(f"    instruction block: {_EVENT_WORDS.get(action, action)} {text!r}")
        echo("    instruction block now: " + (" | ".join(blocks[-1]) if blocks[-1] else "(empty)"))
        if decisions:
            echo("    past turns: " + "  ".join(
                f"#{d['turn']} {d['tier']}" + (f" {d['score']:.2f}" if d["score"] is not None else "")
                + (" (revoked rule)" if d["retired"] else "") for d in decisions))
        echo(f"    tokens: {fed} fed ({rec.latent_slots} of them <mem> slots) vs {rec.full_history_tokens} with the "
             f"full history; {turns[-1]['seconds']:.1f}s")
        echo("")

    # The control: the follow-up with no history at all (same model, policy and settings). What the follow-up
    # repeats and the control does not say came from the kept turn, not from what the model knows.
    control = ChatSession(model, policy=DEFAULT_POLICY, max_new_tokens=max_new_tokens,
                          policy_kwargs=DEMO_POLICY).send(SCRIPT[FOLLOW_UP].user)
    echo(f"[control] the same follow-up with no history: {control}")
    echo("")
    checks = _checks(turns, control)
    echo("what the demo showed:")
    for c in checks:
        echo(f"  [{'yes' if c['ok'] else 'NO '}] {c['what']}: {c['detail']}")
    narrow = [(i, d) for i, t in enumerate(turns) for d in t["decisions"]
              if d["margin"] is not None and d["margin"] < NARROW_MARGIN]
    if narrow:
        echo("  note: decisions within %.2f of a threshold (they could flip on other hardware): " % NARROW_MARGIN
             + ", ".join(f"turn {i} on #{d['turn']} ({d['tier']}, margin {d['margin']:.3f})" for i, d in narrow))
    echo("")
    echo("/trace of the last turn:")
    echo(format_trace(chat))
    total = time.perf_counter() - t_start
    echo(f"\ndemo finished in {total:.1f}s ({total - load_s:.1f}s after loading)")
    return {"model": model_name, "load_s": load_s, "seconds": total, "tau_low": tau_low, "tau_high": tau_high,
            "turns": turns, "control_reply": control, "checks": {c["name"]: c for c in checks}}


def _tier(turn: dict, past: int) -> dict:
    return next(d for d in turn["decisions"] if d["turn"] == past)


def _fmt(d: dict) -> str:
    score = f"score {d['score']:.3f}" if d["score"] is not None else "no score"
    return f"#{d['turn']} {d['tier']} ({score}" + (f", margin {d['margin']:.3f})" if d["margin"] is not None else ")")


_EVENT_WORDS = {"add": "+ added", "revoke": "- revoked", "replace": "~ replaced", "duplicate": "= duplicate of",
                "conflict-kept": "! conflict, kept", "revoke-unmatched": "? revocation matched nothing:",
                "one-off-ignored": "(one-off request, not kept):"}


def _unguessed(repeated: list[str], control: str) -> tuple[bool, str]:
    """Whether most of the kept reply's words the follow-up repeats are ones the no-history control does not say
    (a title's "Whispers" can be guessed; "Whispers of Shadows: A Tale of Secrets" cannot), and the check's detail.

    >>> _unguessed(["Whispers", "Shadows", "Tale", "Secrets"], '"Whispers of the Wind"')[0]
    True
    >>> _unguessed(["Whispers", "Wind"], '"Whispers of the Wind"')[0], _unguessed([], "anything")[0]
    (False, False)
    """
    guessed = [w for w in repeated if w in control]
    unguessed = [w for w in repeated if w not in control]
    detail = (f"without any history the same follow-up gets {control!r}: of the repeated "
              f"{', '.join(repeated) or '(nothing repeated)'}, it says "
              + (f"{', '.join(guessed)} but not {', '.join(unguessed) or 'the rest'}" if guessed else "none"))
    return len(unguessed) * 2 > len(repeated), detail


def _checks(turns: list[dict], control: str) -> list[dict]:
    instruction = SCRIPT[INSTRUCTION].user
    probe, follow = turns[PROBE], turns[FOLLOW_UP]
    words = _answer_words(SCRIPT[FACT].user, turns[FACT]["reply"])
    repeated = [w for w in words if w in follow["reply"]]
    kept = _tier(follow, FACT)
    dropped = [d for d in follow["decisions"] if d["turn"] != FACT]  # every other past turn is unrelated to it
    fed = sum(t["tokens"] for t in turns)
    full = sum(t["full_history_tokens"] for t in turns)
    out = [
        ("captured", "global instruction captured", instruction in turns[INSTRUCTION]["instructions"],
         f"turn {INSTRUCTION} put {instruction!r} into the instruction block"),
        ("obeyed", "instruction used from the block", NAME.lower() in probe["reply"].lower(),
         f"turn {PROBE} replied {probe['reply']!r} with its instruction turn {_fmt(_tier(probe, INSTRUCTION))}"),
        ("revoked", "instruction revoked", instruction in turns[REVOKE - 1]["instructions"]
         and not any(instruction == b for b in turns[REVOKE]["instructions"]),
         f"turn {REVOKE} emptied the block" if not turns[REVOKE]["instructions"]
         else f"block after turn {REVOKE}: {turns[REVOKE]['instructions']}"),
        ("related_kept", "related turn kept", kept["tier"] in ("raw", "latent"),
         f"turn {FOLLOW_UP} kept {_fmt(kept)}, whose reply was {turns[FACT]['reply']!r}"),
        ("related_used", "related turn used", bool(repeated),
         f"turn {FOLLOW_UP} replied {follow['reply']!r}; the kept reply's answer: {', '.join(words) or '(none found)'}"),
        ("only_from_the_turn", "answer came from the kept turn", *_unguessed(repeated, control)),
        ("unrelated_dropped", "unrelated turns dropped", all(d["tier"] == "drop" for d in dropped),
         f"turn {FOLLOW_UP}: " + ", ".join(_fmt(d) for d in dropped)),
        ("tokens_saved", "tokens saved", fed < full,
         f"{fed} tokens fed over {len(turns)} turns vs {full} with the full history ({1 - fed / full:.0%} fewer)"),
    ]
    return [{"name": n, "what": w, "ok": bool(ok), "detail": d} for n, w, ok, d in out]
