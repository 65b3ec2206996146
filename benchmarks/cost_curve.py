"""What one turn costs as the history grows: time split, prefilled tokens and bytes held, per policy.

    OMP_NUM_THREADS=1 python benchmarks/cost_curve.py [--model smollm2-135m] \
        [--lengths 1024,2048,4096,window,1.5window] [--variants vanilla-kv,vanilla-nokv,rhea-kept,...] \
        [--data ultrachat_200k_sample20.json] [--turns 1] [--max-new-tokens 16] \
        [--out benchmarks/results/cost_curve_by_history_length_smollm2-135m_cpu]

For every history length L (content tokens of the past turns, counted with the model's tokenizer;
``window`` is the model's window, ``1.5window`` one and a half times it, where vanilla must cut),
each variant gets a fresh `ChatSession` given an L-token history (its policy catches up on it, as
on a conversation sent as a message list; those seconds are recorded as ``catch_up_s``, apart
from the turns), answers one warm-up turn (vanilla's history cache then holds the prompt, a kept
plan is made; skipped for vanilla-nokv and kvpress, whose turns do not depend on the one
before) and then ``--turns`` measured turns. Per measured turn (the mean over them):

* seconds split into ``score_s`` (planning less compression: the recognizer, scoring the past
  turns), ``compress_s`` (replies compressed to latents, in planning and after the reply),
  ``prefill_s`` and ``decode_s`` (kvpress: its prefill under the press and its decoding), the
  rest (rendering, observing) in ``other_s``; ``latency_s`` is their sum, ``cpu_s`` the
  process's CPU seconds for the turn (steadier than wall time on a shared machine);
* ``prefilled_tokens``: what the model ran its prefill over (context less what the history cache
  reused; kvpress: the whole history, then pruned), ``context_tokens`` (what the answer saw),
  ``dropped_turns`` (turns cut to fit the window);
* bytes held once the turn is done (`ChatSession.bytes_held`): ``kv_cache`` (the history cache's
  keys/values, or kvpress's pruned cache), ``latents`` and ``instructions``, and
  ``turn_kv_bytes``, the keys/values the turn's own prompt and reply occupy while it runs
  (tokens x the model's per-token KV bytes).

Variants: ``vanilla-kv`` / ``vanilla-nokv`` (every turn, with and without the history cache),
``rhea-kept`` (rhea, its plan kept for ``replan_every`` turns, the default) and ``rhea-per-turn``
(``replan_every=1``), ``bm25``, and ``kvpress-snapkv`` (SnapKV pruning the history to
``--kvpress-ratio``; skipped, with the reason in the JSON, where kvpress is not importable:
``make peers`` builds an environment with it). The JSON's ``crossings`` give, for every variant
and for latency, CPU seconds, prefilled tokens and bytes held, the history lengths where its curve
crosses vanilla-kv's (linear between measured lengths), and on which side it lies at the
shortest and longest length. Writes ``<out>.json`` and ``<out>.png``.

Histories come from ``--data`` (a JSON list of ``{"messages": [{"role", "content"}, ...]}``
records, e.g. UltraChat; records are taken in order and reused from the start when a length
needs more turns than the file holds, said in the JSON) or from a built-in generator of
explanatory exchanges (`builtin_turns`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rhea.errors import RheaConfigError  # noqa: E402
from rhea.storage import output_file  # noqa: E402


class CostCurveError(RheaConfigError):
    """A cost-curve option or data file cannot be used as given (the message says how to fix it)."""


@dataclass
class Variant:
    """One curve: a policy, its keywords, and whether the session keeps its history cache."""

    name: str
    policy: str
    kwargs: dict = field(default_factory=dict)
    reuse_prefix_cache: bool = True
    #: whether a turn depends on the one before (a history cache, a kept plan): False skips the warm-up turn
    stateful: bool = True


def variants(kvpress_ratio: float = 0.5) -> dict[str, Variant]:
    return {v.name: v for v in (
        Variant("vanilla-kv", "vanilla"),
        Variant("vanilla-nokv", "vanilla", reuse_prefix_cache=False, stateful=False),
        Variant("rhea-kept", "rhea"),
        Variant("rhea-per-turn", "rhea", {"replan_every": 1}),
        Variant("bm25", "bm25"),
        Variant("kvpress-snapkv", "kvpress-snapkv", {"compression_ratio": kvpress_ratio}, stateful=False),
    )}


DEFAULT_VARIANTS = "vanilla-kv,vanilla-nokv,rhea-kept,rhea-per-turn,bm25,kvpress-snapkv"
REFERENCE = "vanilla-kv"
CURVE_METRICS = ("latency_s", "cpu_s", "prefilled_tokens", "bytes_held")

_SENTENCES = (
    "A good way to think about {topic} is to start from the problem it solves and work outward from there.",
    "Historically, {topic} developed in small steps, and most of the early ideas were refined many times.",
    "One common misunderstanding is that {topic} works the same way in every setting, which is rarely true.",
    "In practice, people who work with {topic} care most about reliability, cost and how easy it is to explain.",
    "For example, a beginner might notice only the visible parts of {topic}, while the details matter more.",
    "The main trade-off in {topic} is between doing things quickly and doing them carefully enough to last.",
    "Researchers still debate several open questions about {topic}, especially how far the usual models hold.",
    "If you want to learn more about {topic}, a short introductory book and a few worked examples help a lot.",
    "To summarise, {topic} rewards patience: the basic ideas are simple, but applying them well takes practice.",
    "It also helps to compare {topic} with a related field, because the differences show what is essential.",
)


def builtin_turns(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` (question, reply) exchanges about the efficiency suite's topics: a verbose request and a
    reply of four to seven explanatory sentences about its topic (text written for rhea)."""
    from rhea.eval.suites.builtin import ORDINARY_QUESTIONS, VERBOSE_TEMPLATES, VERBOSE_TOPICS

    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choice(VERBOSE_TOPICS)
        user = rng.choice(VERBOSE_TEMPLATES).format(topic=topic) if i % 3 else rng.choice(ORDINARY_QUESTIONS)
        reply = " ".join(s.format(topic=topic) for s in rng.sample(_SENTENCES, rng.randint(4, 7)))
        out.append((user, reply))
    return out


def data_turns(path: str | os.PathLike) -> list[tuple[str, str]]:
    """(user, assistant) pairs of every record of a JSON list of ``{"messages": [...]}`` chats, in order."""
    path = Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CostCurveError(f"--data {path}: no such file; pass a JSON list of chats or leave --data out "
                             "for the built-in generator") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CostCurveError(f"--data {path} is not readable JSON ({e}); pass a JSON list of "
                             '{"messages": [{"role", "content"}, ...]} records') from None
    if not isinstance(records, list):
        raise CostCurveError(f"--data {path} holds a {type(records).__name__}, not a list of chats")
    pairs = []
    for record in records:
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list):
            raise CostCurveError(f"--data {path}: a record without a 'messages' list ({str(record)[:80]!r})")
        user = None
        for m in messages:
            role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
            if not isinstance(content, str) or not content.strip():
                continue
            if role == "user":
                user = content
            elif role == "assistant" and user is not None:
                pairs.append((user, content))
                user = None
    if len(pairs) < 2:
        raise CostCurveError(f"--data {path} holds {len(pairs)} user/assistant exchanges; it needs at least 2")
    return pairs


def history_of(pairs: list[tuple[str, str]], length: int, tokenizer) -> tuple[list, int, int]:
    """The first turns of `pairs` (cycled) whose content holds at least `length` tokens:
    (turns, their tokens, how many times the pairs were cycled past their end)."""
    from rhea.context import Turn
    from rhea.context.budget import count_text_tokens

    turns, tokens, i = [], 0, 0
    while tokens < length:
        user, reply = pairs[i % len(pairs)]
        turns.append(Turn(user, reply))
        tokens += count_text_tokens(user, tokenizer) + count_text_tokens(reply, tokenizer)
        i += 1
    return turns, tokens, i // len(pairs) if i > len(pairs) else 0


def parse_lengths(spec: str, window: int | None) -> list[int]:
    """``1024,2048,window,1.5window`` -> token counts (``window`` needs a model that declares one)."""
    out = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if item.endswith("window"):
            if window is None:
                raise CostCurveError(f"--lengths {item!r}: this model declares no window; give token counts")
            factor = item[: -len("window")] or "1"
            try:
                out.append(int(float(factor) * window))
            except ValueError:
                raise CostCurveError(f"--lengths {item!r}: write a factor before 'window', e.g. 1.5window") from None
        else:
            try:
                n = int(float(item[:-1]) * 1024) if item.lower().endswith("k") else int(item)
            except ValueError:
                raise CostCurveError(f"--lengths {item!r} is not a token count (e.g. 1024, 4k, window)") from None
            out.append(n)
    if not out or any(n < 1 for n in out):
        raise CostCurveError(f"--lengths {spec!r} must list token counts >= 1")
    return sorted(set(out))


def kv_bytes_per_token(model) -> int:
    """Keys + values of one token over every layer, at the model's dtype."""
    cfg = model.base_model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * heads * head_dim * model.dtype.itemsize


def turn_cost(session, record, plan, per_token_kv: int, cpu_s: float) -> dict:
    """One measured turn's row: `rhea.eval.episodes.cost_row` with kvpress's own prefill/decode
    folded in, prefilled tokens, the bytes held split, and the turn's own KV bytes."""
    from rhea.eval.episodes import cost_row

    row = cost_row(record)
    t = record.timings
    press = next((r for r in plan.decisions.records if r.get("event") == "kvpress"), None)
    if press is not None:  # the policy prefilled and decoded itself; the session generated nothing
        row["prefill_s"] += float(t.get("press_prefill_s", 0.0))
        row["decode_s"] += float(t.get("press_decode_s", 0.0))
        row["score_s"] = 0.0
        row["prefilled_tokens"] = record.full_history_tokens
    else:
        row["prefilled_tokens"] = row["context_tokens"] - int(row["prefix_reused_tokens"])
    # kvpress's prefill and decode happen in planning (plan_s), so latency_s holds them once already
    other = row["latency_s"] - row["score_s"] - row["compress_s"] - row["prefill_s"] - row["decode_s"]
    row["other_s"] = max(other, 0.0)
    row["cpu_s"] = cpu_s
    held = session.bytes_held()
    row["bytes_held"] = sum(held.values())
    row["bytes_held_split"] = held
    row["turn_kv_bytes"] = (row["prefilled_tokens"] + int(row["prefix_reused_tokens"]) + row["new_tokens"]) \
        * per_token_kv
    row["dropped_turns"] = int(row["tiers"].get("drop", 0)) if press is None else 0
    return row


def measure(model, variant: Variant, history: list, queries: list[str], max_new_tokens: int) -> dict:
    """A fresh session on `history` (caught up), one warm-up turn (the first query; not for a variant
    whose turns do not depend on the one before), then one measured turn per query."""
    from rhea.context import Conversation
    from rhea.session import ChatSession

    session = ChatSession(model, policy=variant.policy, max_new_tokens=max_new_tokens,
                          reuse_prefix_cache=variant.reuse_prefix_cache, policy_kwargs=dict(variant.kwargs))
    per_token = kv_bytes_per_token(model)
    conversation = Conversation(list(history))
    t0, c0 = time.perf_counter(), time.process_time()
    session.policy.catch_up(conversation)  # as a history sent as a message list is taken in
    session.conversation = conversation
    catch_up_s, catch_up_cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = []
    if not variant.stateful:
        queries = queries[1:]
    for i, query in enumerate(queries):
        c0 = time.process_time()
        session.send(query)
        row = turn_cost(session, session.records[-1], session.last_plan, per_token, time.process_time() - c0)
        row["warm_up"] = i == 0 and variant.stateful
        rows.append(row)
    measured = [r for r in rows if not r["warm_up"]] or rows
    keys = ("latency_s", "cpu_s", "score_s", "compress_s", "prefill_s", "decode_s", "other_s", "prefilled_tokens",
            "context_tokens", "latent_slots", "new_tokens", "full_history_tokens", "bytes_held", "turn_kv_bytes",
            "dropped_turns", "prefix_reused_tokens")
    mean = {k: sum(float(r[k]) for r in measured) / len(measured) for k in keys}
    split = {}
    for r in measured:
        for kind, n in r["bytes_held_split"].items():
            split[kind] = split.get(kind, 0) + n / len(measured)
    mean["bytes_held_split"] = split
    warm = {k: rows[0][k] for k in keys} if rows[0]["warm_up"] else None
    return {**mean, "catch_up_s": catch_up_s, "catch_up_cpu_s": catch_up_cpu, "measured_turns": len(measured),
            "warm_up": warm}


def crossings(points: dict[str, list[dict]], metric: str, reference: str = REFERENCE) -> dict:
    """Where each curve of `points` (variant -> rows with ``history_tokens`` and `metric`) crosses
    `reference`'s, by linear interpolation between the lengths both measured, and its ratio to the
    reference at each of them."""
    ref = {p["history_tokens"]: p[metric] for p in points.get(reference, [])}
    out = {}
    for name, rows in points.items():
        if name == reference:
            continue
        common = sorted((p["history_tokens"], p[metric] - ref[p["history_tokens"]]) for p in rows
                        if p["history_tokens"] in ref)
        if not common:
            continue
        at = []
        for (x0, d0), (x1, d1) in zip(common, common[1:]):
            if d0 == 0:
                at.append(x0)
            elif d0 * d1 < 0:
                at.append(round(x0 + (x1 - x0) * d0 / (d0 - d1)))
        if common[-1][1] == 0 and common[-1][0] not in at:
            at.append(common[-1][0])
        side = lambda d: "above" if d > 0 else "below" if d < 0 else "equal"  # noqa: E731
        mine = {p["history_tokens"]: p[metric] for p in rows}
        out[name] = {"crosses_at_history_tokens": at, "at_shortest": side(common[0][1]),
                     "at_longest": side(common[-1][1]), "lengths": [x for x, _ in common],
                     # this curve over the reference's at each length (None where the reference is 0)
                     "ratio": {str(x): (round(mine[x] / ref[x], 4) if ref[x] else None) for x, _ in common}}
    return out


def run_curve(model, lengths: list[int], names: list[str], pairs: list[tuple[str, str]], queries: list[str], *,
              max_new_tokens: int = 16, kvpress_ratio: float = 0.5, progress=print, on_point=None) -> dict:
    """Every variant of `names` at every history length; the JSON-ready result (points, crossings, skips).
    `on_point(result)` is called with the result so far after every point (``complete`` False until the end)."""
    table = variants(kvpress_ratio)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise CostCurveError(f"--variants: unknown {unknown}; choose from {sorted(table)}")
    if len(queries) < 2:
        raise CostCurveError("at least 2 queries are needed: one warm-up turn and one measured turn")
    skipped = {}
    if "kvpress-snapkv" in names:
        try:
            import kvpress  # noqa: F401
        except ImportError as e:
            skipped["kvpress-snapkv"] = (f"kvpress is not importable here ({e}); `make peers` builds .venv-peers "
                                         "with it, run this script there")
    points: dict[str, list[dict]] = {n: [] for n in names if n not in skipped}
    histories = {}

    def result(complete: bool) -> dict:
        return {"complete": complete, "points": points, "skipped": skipped, "histories": histories,
                "variants": {n: {"policy": table[n].policy, "kwargs": table[n].kwargs,
                                 "reuse_prefix_cache": table[n].reuse_prefix_cache} for n in names},
                "crossings": {m: crossings(points, m) for m in CURVE_METRICS} if REFERENCE in points else {},
                "reference": REFERENCE}
    for length in lengths:
        turns, tokens, cycled = history_of(pairs, length, model.tokenizer)
        histories[length] = {"turns": len(turns), "tokens": tokens, "cycled": cycled}
        for name in points:
            row = measure(model, table[name], turns, queries, max_new_tokens)
            row.update(history_tokens=length, history_turns=len(turns), history_content_tokens=tokens)
            points[name].append(row)
            progress(json.dumps({"variant": name, "history_tokens": length,
                                 **{k: round(row[k], 3) for k in ("latency_s", "cpu_s", "score_s", "compress_s",
                                                                  "prefill_s", "decode_s", "catch_up_s")},
                                 "prefilled_tokens": int(row["prefilled_tokens"]),
                                 "bytes_held": int(row["bytes_held"])}))
            if on_point is not None:
                on_point(result(False))
    return result(True)


def merge(results: list[dict]) -> dict:
    """One result from several runs of the same model and settings (e.g. short and long histories run
    apart): their points by variant and length (a later run's point replaces an earlier one's), the
    crossings recomputed; ``meta`` is the first run's, with every run's command and ``not_run``."""
    if not results:
        raise CostCurveError("--merge needs at least one JSON")
    keys = ("model", "device", "dtype", "threads", "max_new_tokens", "measured_turns", "data")
    first = results[0]["meta"]
    for r in results[1:]:
        differ = [k for k in keys if r["meta"].get(k) != first.get(k)]
        if differ:
            raise CostCurveError(f"--merge: runs differ in {differ}; merge only runs of one model and settings")
    points: dict[str, dict[int, dict]] = {}
    out = {"complete": all(r.get("complete") for r in results), "skipped": {}, "histories": {}, "variants": {},
           "reference": REFERENCE}
    for r in results:
        for name, rows in r["points"].items():
            for row in rows:
                points.setdefault(name, {})[row["history_tokens"]] = row
        out["skipped"].update(r.get("skipped", {}))
        out["histories"].update(r.get("histories", {}))
        out["variants"].update(r.get("variants", {}))
    out["points"] = {name: [by[x] for x in sorted(by)] for name, by in points.items()}
    out["crossings"] = {m: crossings(out["points"], m) for m in CURVE_METRICS} if REFERENCE in out["points"] else {}
    meta = dict(first)
    meta["lengths"] = sorted({x for by in points.values() for x in by})
    meta["command"] = [r["meta"].get("command") for r in results]
    meta["not_run"] = "; ".join(str(r["meta"]["not_run"]) for r in results if r["meta"].get("not_run")) or None
    out["meta"] = meta
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = result["meta"]
    points = {name: rows for name, rows in result["points"].items() if rows}  # a run stopped early may lack some
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    panels = (("cpu_s", "CPU seconds per turn"), ("prefilled_tokens", "prefilled tokens per turn"),
              ("bytes_held", "bytes held after the turn (none: not drawn)"))
    for ax, (metric, label) in zip(axes.flat, panels):
        for name, rows in points.items():
            shown = [r for r in rows if r[metric] > 0]  # a log axis: a variant holding nothing is left out
            ax.plot([r["history_tokens"] for r in shown], [r[metric] for r in shown], marker="o", markersize=3,
                    label=name, linewidth=2.2 if name == REFERENCE else 1.2)
        if meta.get("window"):
            ax.axvline(meta["window"], color="k", linestyle=":", linewidth=0.8, label="window")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("history tokens")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    ax = axes.flat[3]
    names = list(points)
    longest = [rows[-1] for rows in points.values()]
    bottom = [0.0] * len(names)
    for part in ("score_s", "compress_s", "prefill_s", "decode_s", "other_s"):
        vals = [r[part] for r in longest]
        ax.bar(range(len(names)), vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(names)), [f"{n}\n{r['history_tokens']}" for n, r in zip(names, longest)], fontsize=7)
    ax.set_ylabel("wall seconds per turn, split (longest history)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"cost of a turn against history length: {meta['model']} on {meta['device']} "
                 f"({meta['threads']} thread(s), {meta['dtype']}), {meta['max_new_tokens']} new tokens", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _with(out: Path, suffix: str) -> Path:
    """`out` with `suffix` appended (not replacing a dotted tail such as ``qwen2.5-coder-1.5b``)."""
    return out.with_name(out.name + suffix)


def read_result(path: Path) -> dict:
    """A JSON this script wrote (`CostCurveError` for anything else)."""
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CostCurveError(f"{path}: not a readable cost-curve JSON ({e})") from None
    if not isinstance(result, dict) or not {"points", "meta"} <= set(result):
        raise CostCurveError(f"{path}: not a cost-curve JSON (no 'points' and 'meta'); pass a JSON this script wrote")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lengths", default="1024,2048,4096,window,1.5window",
                    help="history lengths in tokens: counts, 4k, window, 1.5window")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--data", default=None, help="JSON list of {'messages': [...]} chats (default: built-in)")
    ap.add_argument("--turns", type=int, default=1, help="measured turns per point, after one warm-up turn")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--kvpress-ratio", type=float, default=0.5, help="fraction of the history SnapKV prunes")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--not-run", default=None, help="lengths left out of this run and why, recorded in the JSON "
                                                     "(e.g. '16384,32768: 2-core shared CPU')")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, metavar="JSON",
                    help="only draw the PNG of a written JSON (e.g. a run stopped early), beside it")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON",
                    help="merge the JSONs of several runs (same model and settings) into --out, and draw it")
    ap.add_argument("--not-run-note", default=None, help="with --merge: replaces the merged 'not_run' note")
    args = ap.parse_args(argv)
    if args.plot is not None:
        result = read_result(args.plot)
        plot(result, output_file(args.plot, ".png"))
        return 0
    if args.merge is not None:
        if args.out is None:
            ap.error("--merge needs --out")
        result = merge([read_result(p) for p in args.merge])
        if args.not_run_note is not None:
            result["meta"]["not_run"] = args.not_run_note
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _with(args.out, ".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float))
        os.replace(tmp, _with(args.out, ".json"))
        plot(result, _with(args.out, ".png"))
        return 0
    if args.turns < 1 or args.max_new_tokens < 1:
        ap.error("--turns and --max-new-tokens must be >= 1")
    if not 0.0 <= args.kvpress_ratio < 1.0:
        ap.error("--kvpress-ratio must be in [0, 1)")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    table = variants(args.kvpress_ratio)
    if not names or any(n not in table for n in names):
        ap.error(f"--variants must name some of {sorted(table)}")
    pairs = data_turns(args.data) if args.data else builtin_turns(400)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from rhea.context.budget import budget_of
    from rhea.eval.environment import cpu_name
    from rhea.modeling.loading import load_rhea_model

    model = load_rhea_model(args.model, device=args.device)
    model = (model[0] if isinstance(model, tuple) else model).eval()
    budget = budget_of(model, args.max_new_tokens, model.tokenizer)
    window = budget.window if budget is not None else None
    lengths = parse_lengths(args.lengths, window)
    queries = [u for u, _ in builtin_turns(args.turns + 1, seed=1)]
    from rhea.peers.kvpress_policy import kvpress_version
    import transformers

    meta = {
        "model": args.model, "device": args.device, "dtype": str(model.dtype), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__, "kvpress": kvpress_version(),
        "cpu": cpu_name(), "machine": platform.machine(), "window": window, "lengths": lengths,
        "max_new_tokens": args.max_new_tokens, "measured_turns": args.turns, "kv_bytes_per_token":
        kv_bytes_per_token(model), "data": os.path.basename(args.data) if args.data else "built-in generator",
        "not_run": args.not_run,
        "command": "python benchmarks/cost_curve.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    device = args.device if args.device != "auto" else str(model.device.type)
    out = args.out or Path("benchmarks/results") / f"cost_curve_by_history_length_{args.model}_{device}"
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(result: dict) -> None:  # after every point, atomically: a run stopped early keeps what it measured
        result["meta"] = meta
        tmp = _with(out, ".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=float))
        os.replace(tmp, _with(out, ".json"))

    result = run_curve(model, lengths, names, pairs, queries, max_new_tokens=args.max_new_tokens,
                       kvpress_ratio=args.kvpress_ratio, on_point=write)
    write(result)
    plot(result, _with(out, ".png"))
    print(f"wrote {_with(out, '.json')} and .png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
