"""Held-apart fact recall through latents vs raw vs dropped: do the latents carry their reply's facts?

For a model (zoo name or Rhea directory) and the hand-written set `rhea/data/fact_recall.jsonl`
(60 replies, 6 kinds, no names or templates of `rhea.training.synthetic`), each item's first
reply is shown as raw text, as latents from the model's compress adapter, or dropped (and with
``--fresh``, as latents from fresh untrained adapters on the same base); the follow-up question
is answered greedily through the project's own path (`assemble_plan` -> `generate_from_plan`)
and scored by normalised containment of an accepted answer (`rhea.eval.fact_recall`).

Rows are appended to ``<out>.rows.jsonl`` as they finish; rerunning the same command resumes
(items already answered are skipped). Writes ``<out>.json`` (accuracy per condition and kind
with 95% Wilson intervals, paired latent-dropped / latent/raw with bootstrap intervals, the
criterion latent >= 0.6 x raw and >= dropped + 0.25) and ``<out>.png``, and prints PASS/FAIL.

    python benchmarks/fact_recall.py --model smollm2-135m --out benchmarks/results/fact_recall_smollm2
    python benchmarks/fact_recall.py --model qwen2.5-coder-1.5b --limit 24 \
        --out benchmarks/results/fact_recall_qwen
    python benchmarks/fact_recall.py --summarise-only --out benchmarks/results/fact_recall_qwen
    python benchmarks/fact_recall.py --model DIR --mode reconstruct --conditions latent,latent_other \
        --out benchmarks/results/fact_recall_DIR_recon     # are the facts in the latents at all?
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rhea.errors import RheaConfigError
from rhea.eval.checkpoint import read_rows  # a line cut by a killed run is redone
from rhea.eval.report import read_stored_text, stored_path, unpack_stored
from rhea.eval.fact_recall import (CONDITIONS, KINDS, MODES, QUESTION_FORMS, RECONSTRUCT_CONDITIONS, answer_item,
                                   compare_runs, complete_rows, interleave_kinds, load_items, other_items,
                                   question_form, reconstruct_item, score_item, summarise)


def _ci(lo, hi) -> str:
    """`` [lo, hi]`` signed to 3 decimals, or nothing where one item gives no interval."""
    return "" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]"


def plot(summary: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = summary["accuracy"]
    conds = list(acc)
    groups = ["all"] + [k for k in KINDS if any(k in acc[c]["per_kind"] for c in conds)]
    lp = summary.get("answer_logprob")
    if lp:  # teacher-forced rows: the graded measure beside the all-tokens-right share
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 3.8), gridspec_kw={"width_ratios": [3, 1.3]})
        names = [c for c in conds if c in lp]
        means = [lp[c]["mean_logprob"] for c in names]
        bx.bar(range(len(names)), means, yerr=[[m - lp[c]["mean_logprob_ci"][0] for c, m in zip(names, means)],
                                               [lp[c]["mean_logprob_ci"][1] - m for c, m in zip(names, means)]],
               capsize=3, color=[f"C{j}" for j in range(len(names))])
        bx.set_xticks(range(len(names)), names, fontsize=8)
        bx.set_ylabel("mean log-prob of the answer's tokens (nats)")
        bx.set_title("teacher-forced, 95% bootstrap CI", fontsize=9)
    else:
        fig, ax = plt.subplots(figsize=(9, 3.8))
    w = 0.8 / max(1, len(conds))
    for j, c in enumerate(conds):
        vals, los, his = [], [], []
        for g in groups:
            d = acc[c] if g == "all" else acc[c]["per_kind"].get(g, {"accuracy": 0.0, "ci95": [0.0, 0.0]})
            vals.append(100 * d["accuracy"])
            los.append(max(0.0, 100 * (d["accuracy"] - d["ci95"][0])))
            his.append(max(0.0, 100 * (d["ci95"][1] - d["accuracy"])))
        xs = [i + (j - (len(conds) - 1) / 2) * w for i in range(len(groups))]
        ax.bar(xs, vals, width=w, yerr=[los, his], capsize=2, label=f"{c} (n={acc[c]['n']})")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel("answers with every token the argmax (%)" if lp else "answers containing the fact (%)")
    crit = summary["criterion"]
    verdict = {True: "PASS", False: "FAIL", None: "n/a"}[crit["passed"]]
    ax.set_title(f"{title} — criterion (latent ≥ 0.6×raw and ≥ dropped+0.25): {verdict}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="zoo name (smollm2-135m, qwen2.5-coder-1.5b) or a Rhea directory")
    p.add_argument("--data", default=None, help="fact-recall JSONL (default: the shipped rhea/data/fact_recall.jsonl)")
    p.add_argument("--limit", type=int, default=None, help="first N items, kinds interleaved (default: all)")
    p.add_argument("--conditions", default=None,
                   help="comma-separated subset of raw,latent,dropped,latent_other (default: the first three; "
                        "with --mode reconstruct: latent,latent_other, the only two it takes); "
                        "latent_other: the item's user turn with another item's reply as latents (the control)")
    p.add_argument("--fresh", action="store_true", help="also latents from fresh untrained adapters (2nd model copy)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--mode", choices=MODES, default="generate",
                   help="generate: greedy answers scored by containment (the issue's measure; default); teacher-forced: "
                        "the first accepted answer scored as the reply (all tokens argmax, and its mean log-probability); "
                        "reconstruct: no question, the reply rebuilt from latents under the auto-encoding prompt, scored "
                        "on the tokens that spell the fact and on the rest (--conditions latent,latent_other)")
    p.add_argument("--question-form", choices=QUESTION_FORMS, default="item",
                   help="item: each item's own question (the issue's measure; default); cloze: the fact-QA training "
                        "stage's question over the reply's sentence with the fact blanked out; repeat: the reply asked back "
                        "word for word, what a reconstruction compressor serves (both diagnostics)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default), cuda, cuda:N or auto (checked before any model loads)")
    p.add_argument("--out", required=True, help="output stem: <out>.json, <out>.png, <out>.rows.jsonl")
    p.add_argument("--summarise-only", action="store_true", help="no model: summarise <out>.rows.jsonl")
    p.add_argument("--write-fidelity", default=None, metavar="DIR",
                   help="record this run's raw / latent / dropped accuracies as fidelity['fact_recall'] in DIR's "
                        "rhea_config.json (the adapters measured; their reconstruction fidelity must be recorded first, "
                        "by benchmarks/reconstruction.py --write-fidelity): latent_tier='auto' then also needs the fact-recall "
                        "rule (latent >= 0.6 x raw and >= dropped + 0.25). Needs --mode generate with the item questions; works with --summarise-only")
    p.add_argument("--versus", default=None,
                   help="another run's output stem on the same items and in the same --mode (e.g. an earlier "
                        "checkpoint); records the paired change of latent and of latent - latent_other from it to "
                        "this run (answer log-probability when teacher-forced, share answered right otherwise)")
    args = p.parse_args(argv)

    items = interleave_kinds(load_items(args.data))  # validated before any model is loaded
    items = [question_form(it, args.question_form) for it in items]
    # latent_other's partners come from the whole set, so --limit does not change which reply stands in
    partner = other_items(items) if len(items) > 1 else {it.id: None for it in items}
    if args.limit is not None:
        if args.limit < 1:
            raise RheaConfigError(f"--limit {args.limit} must be >= 1")
        items = items[: args.limit]
    if args.max_new_tokens < 1:
        raise RheaConfigError(f"--max-new-tokens {args.max_new_tokens} must be >= 1")
    if args.conditions is None:
        args.conditions = "latent,latent_other" if args.mode == "reconstruct" else "raw,latent,dropped"
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    allowed = [c for c in CONDITIONS if c != "latent_fresh"]  # latent_fresh comes with --fresh
    if args.mode == "reconstruct":
        allowed = list(RECONSTRUCT_CONDITIONS)
        if args.fresh:
            raise RheaConfigError("--fresh is not measured with --mode reconstruct; drop one of them")
    if not conditions or any(c not in allowed for c in conditions):
        raise RheaConfigError(f"--conditions {args.conditions!r} must be a comma-separated subset of {','.join(allowed)}"
                              + (" with --mode reconstruct" if args.mode == "reconstruct" else ""))
    if not args.summarise_only and not args.model:
        raise RheaConfigError("--model is required unless --summarise-only")
    if args.write_fidelity is not None:
        _check_fidelity_target(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # a committed run is stored gzipped: unpacked before this run appends rows to it and rewrites its summary
    rows_path = unpack_stored(out.with_name(out.name + ".rows.jsonl"))
    unpack_stored(out.with_name(out.name + ".json"))
    rows = read_rows(rows_path)
    for key, value, flag, default in (("question_form", args.question_form, "--question-form", "item"),
                                      ("mode", args.mode, "--mode", "generate")):
        seen = {r.get(key, default) for r in rows}
        if not args.summarise_only and seen - {value}:
            raise RheaConfigError(f"{rows_path} holds rows of {key.replace('_', ' ')} {sorted(seen)}, not {value!r}; "
                                  f"pass the matching {flag} or another --out")
    versus_rows = None
    if args.versus is not None:
        versus_path = stored_path(Path(args.versus).with_name(Path(args.versus).name + ".rows.jsonl"))
        versus_rows = (read_rows(versus_path) if not versus_path.name.endswith(".gz") else
                       [json.loads(line) for line in read_stored_text(versus_path).splitlines() if line.strip()])
        if not versus_rows:
            raise RheaConfigError(f"--versus {args.versus!r}: {versus_path} has no rows; name a run's output stem")
    meta_path = out.with_name(out.name + ".json")
    seconds = 0.0

    if not args.summarise_only:
        import torch

        from rhea.modeling.loading import load_rhea_model, resolve_device
        from rhea.modeling.zoo import check_model_path

        check_model_path(args.model)
        device = resolve_device(args.device)  # a DeviceError naming what torch sees, before any weights load
        torch.set_num_threads(args.threads)
        conditions = conditions + (["latent_fresh"] if args.fresh else [])
        done = {(r["id"], r["condition"]) for r in rows}
        todo = [(it, c) for it in items for c in conditions if (it.id, c) not in done]
        print(f"{len(items)} items x {len(conditions)} conditions; {len(todo)} answers to generate "
              f"({len(rows)} rows already in {rows_path})", flush=True)
        if todo:
            model = load_rhea_model(args.model, device=device).eval()
            fresh = None
            if args.fresh:
                from rhea.modeling import RheaForCausalLM
                from rhea.modeling.loading import load_base_model

                base, tok = load_base_model(args.model if not Path(args.model).is_dir()
                                            else model.config.base_model_name_or_path, dtype=model.dtype)
                fresh = RheaForCausalLM.from_base(base, tok).to(device).eval()
            t0 = time.perf_counter()
            with rows_path.open("a") as f:
                for k, (it, c) in enumerate(todo):
                    m = fresh if c == "latent_fresh" else model
                    t = time.perf_counter()
                    if args.mode == "reconstruct":
                        row = reconstruct_item(m, it, c, other=partner[it.id])
                    elif args.mode == "teacher-forced":
                        row = score_item(m, it, c, other=partner[it.id])
                    else:
                        row = answer_item(m, it, c, max_new_tokens=args.max_new_tokens, other=partner[it.id])
                    row["seconds"] = round(time.perf_counter() - t, 2)
                    row["question_form"], row["mode"] = args.question_form, args.mode
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"[{k + 1}/{len(todo)}] {it.id:12s} {c:13s} {'OK ' if row['correct'] else 'x  '} "
                          f"{row['seconds']:6.1f}s  {row['answer'][:70]!r}", flush=True)
            seconds = time.perf_counter() - t0

    ids = {it.id for it in items} if args.limit is not None else None
    used = complete_rows([r for r in rows if ids is None or r["id"] in ids])
    if not used:
        print(f"no rows in {rows_path}", file=sys.stderr)
        return 2
    summary = summarise(used)
    prev = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    by_id = {it.id: it for it in load_items(args.data)}
    this_command = "python benchmarks/fact_recall.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.summarise_only and prev.get("command") and "--summarise-only" not in prev["command"]:
        # a summary of existing rows keeps the command that generated them, and says who summarised
        this_command, summarised_by = prev["command"], this_command
    else:
        summarised_by = None
    generated_by = prev if summarised_by else {}  # whose generation settings the JSON records
    if summarised_by:
        seconds = prev.get("seconds_this_run", seconds)  # the generating run's seconds, not the summary's 0
    result = {"model": args.model or prev.get("model"), "data": args.data or "rhea/data/fact_recall.jsonl",
              "n_items": len({r["id"] for r in used}),
              "max_new_tokens": generated_by.get("max_new_tokens", args.max_new_tokens),
              "question_form": generated_by.get("question_form", args.question_form),
              "mode": generated_by.get("mode", args.mode),
              "threads": generated_by.get("threads", args.threads),
              "device": generated_by.get("device", args.device),
              "seconds_this_run": round(seconds, 1),
              "command": this_command,
              **({"summarised_by": summarised_by} if summarised_by else {}),
              **summary,
              **({"versus": {"run": args.versus, **compare_runs(versus_rows, used)}} if versus_rows else {}),
              "rows": [{**r, "accepted": list(by_id[r["id"]].answers)} for r in used if r["id"] in by_id]}
    meta_path.write_text(json.dumps(result, indent=2))
    plot(summary, f"fact recall, {result['model']}, {result['n_items']} held-apart items", out.with_name(out.name + ".png"))
    acc = summary["accuracy"]
    for c in acc:
        a = acc[c]
        print(f"{c:13s} {a['correct']:3d}/{a['n']:<3d} = {a['accuracy']:.3f}  95% CI [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]")
    for name, s in summary.get("answer_logprob", {}).items():
        if "mean_logprob" in s:
            print(f"{name:13s} answer log-prob {s['mean_logprob']:+.3f}{_ci(*s['mean_logprob_ci'])}  "
                  f"token acc {s['token_acc']:.3f}"
                  + (f"  | other reply tokens: log-prob {s['rest_mean_logprob']:+.3f}, token acc {s['rest_token_acc']:.3f}"
                     if "rest_mean_logprob" in s else ""))
        else:
            print(f"{name:22s} log-prob diff {s['mean_logprob_diff']:+.3f}{_ci(*s['ci'])}  p = {s['p']:.2g}")
    for name, s in (result.get("versus") or {}).items():
        if name not in ("run", "measure"):
            print(f"change from {args.versus}: {name:26s} {s['change']:+.3f}{_ci(*s['ci'])}  p = {s['p']:.2g}")
    for name, s in summary["paired"].items():
        if s:
            print(f"{name:22s} diff {s['diff']:+.3f} [{s['diff_ci'][0]:+.3f}, {s['diff_ci'][1]:+.3f}]  ratio {s['ratio']}")
    crit = summary["criterion"]
    print({True: "PASS", False: "FAIL", None: "N/A"}[crit["passed"]], "-", crit.get("rule", crit.get("reason")), flush=True)
    if args.write_fidelity is not None:
        if crit["passed"] is None:
            raise RheaConfigError(f"--write-fidelity needs raw, latent and dropped answers in {rows_path}; "
                                  "run with --conditions raw,latent,dropped")
        write_fact_recall(args.write_fidelity, acc, command=this_command)
    return 0


def _check_fidelity_target(args) -> None:
    """--write-fidelity's directory and settings, checked before any model loads."""
    from rhea.modeling.config import RheaConfig

    if args.mode != "generate" or args.question_form != "item" or args.limit is not None:
        raise RheaConfigError("--write-fidelity records the issue's measure: --mode generate, --question-form item, "
                              "every item (no --limit)")
    from rhea.modeling.config import CONFIG_NAME

    if not (Path(args.write_fidelity) / CONFIG_NAME).is_file():
        raise RheaConfigError(f"--write-fidelity {args.write_fidelity!r} has no {CONFIG_NAME}: name the directory of the "
                              "adapters measured (e.g. rhea/data/adapters/qwen2.5-coder-1.5b)")
    cfg = RheaConfig.load(args.write_fidelity)
    if not cfg.fidelity:
        raise RheaConfigError(f"{args.write_fidelity} records no reconstruction fidelity; run benchmarks/reconstruction.py "
                              f"--adapters {args.write_fidelity} --write-fidelity first")


def write_fact_recall(directory: str, acc: dict, *, command: str) -> dict:
    """Record raw / latent / dropped accuracies as ``fidelity["fact_recall"]`` in `directory`'s rhea_config.json (and
    its model card); returns the entry."""
    from rhea.modeling.card import write_model_card
    from rhea.modeling.config import RheaConfig

    cfg = RheaConfig.load(directory)
    entry = {"latent": round(acc["latent"]["accuracy"], 4), "raw": round(acc["raw"]["accuracy"], 4),
             "dropped": round(acc["dropped"]["accuracy"], 4), "n": int(acc["latent"]["n"]),
             "measured_on": f"{command} (greedy answers to questions about held-apart replies)"}
    cfg.fidelity = {**cfg.fidelity, "fact_recall": entry}
    cfg.save(directory)  # recomputes extra.active_mode: the latent tier's state under the new fidelity
    write_model_card(directory)
    print(f"fidelity['fact_recall'] written to {directory}: {entry}; {cfg.active_mode()['reason']}", flush=True)
    return entry


if __name__ == "__main__":
    sys.exit(main())
