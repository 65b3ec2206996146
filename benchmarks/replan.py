"""Re-planning every few turns (`RheaConfig.replan_every` / `replan_top`): what the kept plans cost in retrieval, and
what they give back in prompt reuse, on real multi-session conversations.

`rhea` re-decides every earlier turn's tier for each query, so its prompt changes after the instruction block and
the session's prefix KV cache reuses little of it (docs/reports/quality.md, "Efficiency with the trained adapters": 22% of the
prompt on Qwen2.5-Coder-1.5B against vanilla's 97%). With ``replan_every`` k a plan is kept for up to k - 1 more
queries (newer turns appended raw), and with ``replan_top`` m the query is still scored, and each of its m best turns
that a fresh plan would show raw but the kept plan hides is recalled raw after the newest turn and stays there
until the next fresh plan (``replan_hidden="recall"``, the prompt grows at its end) or makes a fresh plan at once
(``"replan"``).

The questions are `benchmarks/retrieval_recall.py`'s (TopiOCQA topic returns, MultiWOZ / SGD slot carry-overs, each
needing one earlier turn, inside a history of ``--sessions`` other conversations; both of its layouts). For each
question the whole history is walked turn by turn, each turn's own user message being the query of that step, with
the library's scorer (`RheaConfig` defaults: z-score fusion of MiniLM cosine and BM25) and tier rule (budget: 10 raw,
8 latent, the last 3 raw), exactly as `RheaPolicy._planned` decides, through `rhea.memory.scoring.hidden_best`.
Reported per (k, m), with 95% bootstrap intervals over questions and the paired difference to re-planning every turn:

* ``needed_kept_raw``: at the question, a needed turn is raw text, in place or recalled (what HCR is for);
* ``needed_all_dropped``: at the question, every needed turn is dropped (and not recalled);
* ``fresh_share``: steps of the walk that made a fresh plan;
* ``reuse_share``: per step, the share of the prompt's history (raw turns and recalled copies by characters, a latent
  turn as 64, in the prompt's order) before its first difference from the previous step's prompt and reply, i.e.
  what a prefix KV cache can reuse; vanilla's is 1;
* ``raw_turns_per_step`` (recalled copies included) and ``recalled_turns_per_step``: what the prompt carries.

No model runs: the numbers are the plans'. What they cost in seconds on a real model is measured by the efficiency
suite (`rhea bench --suite efficiency --policy-option rhea.replan_every=K`).

    python benchmarks/replan.py --data /work/shared/data
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rhea.memory.scoring import TierRule, assign_tiers, fuse, hidden_best  # noqa: E402
from rhea.modeling.config import RheaConfig  # noqa: E402
from rhea.storage import output_file  # noqa: E402

LATENT_UNITS = 64  # a latent turn's share of the prompt, in characters (16 slots ~ 16 tokens ~ 64 characters)


def load_retrieval_recall():
    import importlib.util

    path = Path(__file__).resolve().parent / "retrieval_recall.py"
    spec = importlib.util.spec_from_file_location("rhea_bench_retrieval_recall", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def walk(texts: list[str], queries: list[str], scores_at, rule: TierRule, every: int, top: int,
         hidden: str = "recall", recall_max: int | None = None) -> list[dict]:
    """One step per query: ``queries[t]`` against ``texts[:t]`` for t = 1..len(queries)-1 (step 0 has no history).

    ``scores_at(t)`` gives the fused scores and the components of the query of step t over ``texts[:t]``.
    Returns, per step, the tiers in place, the turns shown as recalled copies and where (``copies``: ``[turn,
    after]``, a copy following turn ``after``, the newest turn when it was first recalled, until the next fresh
    plan), and whether the plan was fresh, following `RheaPolicy._planned` (``hidden``: `RheaConfig.replan_hidden`;
    ``recall_max``: `RheaPolicy.replan_recall_max`, a fresh plan when the copies would exceed it).
    """
    plan_at, plan_tiers, out = None, None, []
    copies: dict[int, int] = {}
    for t in range(1, len(queries)):
        score, comps = scores_at(t)
        fresh = assign_tiers(score, comps, rule)
        kept = None
        if every > 1 and plan_at is not None and t - plan_at < every:
            kept = plan_tiers + ["raw"] * (t - plan_at)
            missing = hidden_best(kept, fresh, score, top)
            if missing and hidden == "replan":
                kept = None
            elif recall_max is not None and len(set(copies) | set(missing)) > recall_max:
                kept = None
            else:
                for turn in missing:
                    copies.setdefault(turn, t - 1)
        if kept is None:
            plan_at, plan_tiers, copies = t, list(fresh), {}
        out.append({"t": t, "tiers": kept if kept is not None else list(fresh), "recalled": sorted(copies),
                    "copies": sorted([turn, after] for turn, after in copies.items()), "fresh": kept is None})
    return out


def prompt_items(tiers: list[str], copies=()) -> list[tuple[int, str]]:
    """The prompt's history in order, as `rhea.policies.assemble_plan` lays it out: each turn shown in place
    ``(turn, tier)``, each recalled copy ``(turn, "copy")`` after the turn it follows."""
    after_of: dict[int, list[int]] = {}
    for turn, after in sorted(copies):
        after_of.setdefault(min(after, len(tiers) - 1), []).append(turn)
    items = []
    for i, tier in enumerate(tiers):
        if tier != "drop":
            items.append((i, tier))
        items += [(j, "copy") for j in after_of.get(i, ())]
    return items


def reuse_share(prev: list[str] | None, now: list[str], sizes: list[int], prev_copies=(), now_copies=()) -> float | None:
    """Share of `now`'s prompt history (`prompt_items`: turns in place and recalled copies, by size) that a prefix
    cache holding `prev`'s prompt and reply reuses: the common prefix of `now`'s items and `prev`'s followed by the
    turn added since (the last query and its reply, in place)."""
    if prev is None:
        return None
    size = lambda item: LATENT_UNITS if item[1] == "latent" else sizes[item[0]]  # noqa: E731
    items = prompt_items(now, now_copies)
    total = sum(size(x) for x in items)
    if total == 0:
        return 1.0
    cached = prompt_items(prev, prev_copies) + [(len(prev), "raw")]
    reused = 0
    for a, b in zip(cached, items):
        if a != b:
            break
        reused += size(b)
    return reused / total


def bootstrap(values, n: int = 2000, seed: int = 0) -> dict:
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), (n, len(v)))].mean(1)
    return {"mean": round(float(v.mean()), 3), "ci95": [round(float(np.quantile(means, 0.025)), 3),
                                                       round(float(np.quantile(means, 0.975)), 3)]}


def paired(values, base, seed: int = 0) -> dict:
    d = np.asarray(values, dtype=float) - np.asarray(base, dtype=float)
    out = bootstrap(d, seed=seed)
    rng = np.random.default_rng(seed)  # sign-flip test of the mean paired difference
    flips = rng.choice([-1.0, 1.0], size=(4000, len(d)))
    out["p"] = round(float(np.mean(np.abs((flips * d).mean(1)) >= abs(d.mean()) - 1e-12)), 4)
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the shared data folder (holds dialogue_corpora/ and dst_corpora/)")
    p.add_argument("--sessions", type=int, default=3, help="earlier whole conversations before the question's own")
    p.add_argument("--max-per-source", type=int, default=0, help="questions per source (0 = all)")
    p.add_argument("--every", type=int, nargs="+", default=[1, 2, 4, 8], help="replan_every values")
    p.add_argument("--top", type=int, nargs="+", default=[0, 1, 3, 5, 10], help="replan_top values (with every > 1)")
    p.add_argument("--recall-max", type=int, nargs="*", default=[],
                   help="replan_recall_max values: each recall setting also runs with at most this many copies")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/replan")
    args = p.parse_args(argv)
    bad = [v for v in args.every if v < 1] + [v for v in args.top if v < 0] + [v for v in args.recall_max if v < 0]
    if bad or 1 not in args.every:
        p.error(f"--every needs 1 (the baseline) and values >= 1, --top values >= 0; got {args.every} / {args.top}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rr = load_retrieval_recall()
    corpora = rr.load_corpora(Path(args.data))
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = RheaConfig()
    rule = TierRule("budget", cfg.tau_low, cfg.tau_high, cfg.dense_floor, cfg.dense_high, cfg.max_raw, cfg.max_latent,
                    True, recent_raw=cfg.recent_raw)
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.backends.retrieval import BM25Retriever

    embedder = MiniLMEmbedder()
    settings = [(1, 0, "replan", None)] + [(k, m, h, None) for k in args.every if k > 1 for m in args.top
                                           for h in (("replan", "recall") if m else ("replan",))]
    settings += [(k, m, "recall", c) for k in args.every if k > 1 for m in args.top if m for c in args.recall_max]

    def name(k, m, h, c=None):
        if k == 1:
            return "every turn"
        return f"every {k}, top {m}" + (", recall" if h == "recall" else "") + (f" (at most {c})" if c is not None else "")
    layouts = {}
    for layout in ("contiguous", "returning"):
        episodes = rr.build_episodes(corpora, args.sessions, args.max_per_source, args.seed, layout)
        per = {name(*s): {"kept": [], "dropped": [], "fresh": [], "reuse": [], "raw": [], "recalled": []} for s in settings}
        for ep in episodes:
            texts = [rr.turn_text(p) for p in ep.history]
            queries = [p[0] for p in ep.history] + [ep.q.query]
            emb_t = torch.from_numpy(embedder.encode(texts)).double()
            emb_q = torch.from_numpy(embedder.encode(queries)).double()
            cache: dict[int, tuple] = {}

            def scores_at(t: int):
                if t not in cache:
                    comps = {"dense": emb_t[:t] @ emb_q[t],
                             "bm25": torch.tensor(BM25Retriever(texts[:t]).scores(queries[t]), dtype=torch.float64)}
                    cache[t] = (fuse(comps, cfg.fusion, rrf_k=cfg.rrf_k), comps)
                return cache[t]

            sizes = [len(x) for x in texts]
            for k, m, h, c in settings:
                steps = walk(texts, queries, scores_at, rule, k, m, h, c)
                last, recalled = steps[-1]["tiers"], set(steps[-1]["recalled"])
                row = per[name(k, m, h, c)]
                row["kept"].append(any(last[j] == "raw" or j in recalled for j in ep.needed))
                row["dropped"].append(all(last[j] == "drop" and j not in recalled for j in ep.needed))
                row["fresh"].append(np.mean([s["fresh"] for s in steps]))
                shares = [reuse_share(a["tiers"], b["tiers"], sizes, a["copies"], b["copies"])
                          for a, b in zip(steps, steps[1:])]
                row["reuse"].append(float(np.mean(shares)) if shares else 1.0)
                row["raw"].append(float(np.mean([s["tiers"].count("raw") + len(s["recalled"]) for s in steps])))
                row["recalled"].append(float(np.mean([len(s["recalled"]) for s in steps])))
        base = per["every turn"]
        res = {}
        for key, row in per.items():
            entry = {"n_questions": len(row["kept"]),
                     "needed_kept_raw": bootstrap(row["kept"], seed=args.seed),
                     "needed_all_dropped": bootstrap(row["dropped"], seed=args.seed),
                     "fresh_share": bootstrap(row["fresh"], seed=args.seed),
                     "reuse_share": bootstrap(row["reuse"], seed=args.seed),
                     "raw_turns_per_step": bootstrap(row["raw"], seed=args.seed),
                     "recalled_turns_per_step": bootstrap(row["recalled"], seed=args.seed)}
            if key != "every turn":
                entry["needed_kept_raw_minus_every_turn"] = paired(row["kept"], base["kept"], seed=args.seed)
                entry["reuse_share_minus_every_turn"] = paired(row["reuse"], base["reuse"], seed=args.seed)
            res[key] = entry
        layouts[layout] = {"n_questions": len(episodes), "results": res}
        print(f"\n{layout}: {len(episodes)} questions")
        print(f"{'setting':<28} {'needed raw':>18} {'vs every turn':>24} {'all dropped':>12} {'fresh':>6} {'reuse':>18}")
        for key, e in res.items():
            d = e.get("needed_kept_raw_minus_every_turn")
            vs = f"{d['mean']:+.3f} [{d['ci95'][0]:+.2f},{d['ci95'][1]:+.2f}]" if d else ""
            print(f"{key:<28} {e['needed_kept_raw']['mean']:.3f} {str(e['needed_kept_raw']['ci95']):>12} {vs:>24} "
                  f"{e['needed_all_dropped']['mean']:>12.3f} {e['fresh_share']['mean']:>6.2f} "
                  f"{e['reuse_share']['mean']:.3f} {str(e['reuse_share']['ci95']):>12}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"benchmark": "replan", "command": "python benchmarks/replan.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "rule": {"mode": rule.mode, "max_raw": rule.max_raw, "max_latent": rule.max_latent,
                        "recent_raw": rule.recent_raw, "scorer": f"{cfg.fusion}({', '.join(cfg.fusion_components)})",
                        "dense_floor": rule.dense_floor},
               "sessions": args.sessions, "seed": args.seed, "latent_units": LATENT_UNITS,
               "wall_s": round(time.perf_counter() - t0, 1), "layouts": layouts}
    output_file(out, ".json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, output_file(out, ".png"))
    print(f"\nwrote {output_file(out, '.json')} and {output_file(out, '.png')} ({summary['wall_s']} s)")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, (layout, lay) in zip(axes, summary["layouts"].items()):
        for key, e in lay["results"].items():
            x, y = e["reuse_share"], e["needed_kept_raw"]
            mode = "every turn" if key == "every turn" else "recall" if "recall" in key else \
                "kept whatever the query needs" if key.endswith("top 0") else "replan"
            color = {"every turn": "black", "recall": "tab:orange", "replan": "tab:blue",
                     "kept whatever the query needs": "tab:gray"}[mode]
            ax.errorbar(x["mean"], y["mean"], xerr=[[x["mean"] - x["ci95"][0]], [x["ci95"][1] - x["mean"]]],
                        yerr=[[y["mean"] - y["ci95"][0]], [y["ci95"][1] - y["mean"]]], fmt="o", capsize=2,
                        color=color, alpha=0.8, label=mode if mode not in ax.get_legend_handles_labels()[1] else None)
            if key == "every turn" or ("top 10" in key and "every 8" in key) or key == "every 8, top 0":
                ax.annotate(key, (x["mean"], y["mean"]), fontsize=7, xytext=(4, -10), textcoords="offset points")
        ax.legend(fontsize=7, loc="lower left")
        ax.set_xlabel("prompt history reusable from the previous turn (share, 95% CI)")
        ax.set_title(f"{layout}: {lay['n_questions']} questions", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("needed turn kept raw at the question (95% CI)")
    fig.suptitle(f"re-planning every k turns ({summary['rule']['scorer']}, budget {summary['rule']['max_raw']} raw + "
                 f"{summary['rule']['max_latent']} latent + last {summary['rule']['recent_raw']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
