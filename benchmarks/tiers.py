"""Tier accuracy of Heuristic Context Retrieval: are needed replies kept and unrelated ones dropped?

For each model (untrained read-out, trained without the contrastive loss, trained with it),
every held-apart triple (reply, needing query, unrelated query; `rhea.calibration.data`
"heldout" families, never trained or calibrated on) is scored exactly as `EpisodicMemory`
scores a turn. Reported per model, for raw and centred cosine:

* ranking accuracy: needing query scores above the unrelated one;
* tier accuracy under the paper's thresholds (τ_low=0.5, τ_high=0.8) and under thresholds
  calibrated on the "calibrate" families (`rhea.calibration.fit_thresholds`, targets keep 90% /
  drop 80%): kept = share of needed replies not dropped, dropped = share of unrelated replies
  dropped, raw = share of needed replies kept as raw text;
* for a model directory with calibrated values in its rhea_config.json (``shipped``), the tier
  accuracy under exactly those values (the issue's acceptance test).

Writes JSON + a PNG of score histograms.

    python benchmarks/tiers.py --model untrained=fresh --model lm-76-steps=runs/default/final \\
        --model contrastive=rhea/data/adapters/smollm2-135m --shipped contrastive
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rhea.calibration.data import DEFAULT_N_CALIBRATION
from rhea.calibration.fit import share
from rhea.storage import output_file

PAPER = (0.5, 0.8)


def load(path: str):
    from rhea.modeling import RheaForCausalLM, load_default_model

    if path == "fresh":
        return load_default_model(trained=False)[0].eval()
    return RheaForCausalLM.from_pretrained(path).eval()


def tier_rates(scores, tau_low: float, tau_high: float) -> dict:
    kept, dropped = scores.tier_accuracy(tau_low)
    return {"tau_low": round(tau_low, 4), "tau_high": round(tau_high, 4), "kept_related": kept, "dropped_unrelated": dropped,
            "raw_related": share(scores.related > tau_high),
            "pass": kept >= 0.9 and dropped >= 0.8}


def evaluate(model, cal_triples, test_triples) -> tuple[dict, dict]:
    from rhea.calibration.fit import encode_triples, fit_thresholds

    cal, test = encode_triples(model, cal_triples), encode_triples(model, test_triples)
    center = cal.mean()
    out, hists = {}, {}
    for mode, c in (("raw", None), ("centred", center)):
        cs, ts = cal.scores(c), test.scores(c)
        fit = fit_thresholds(cs.related, cs.unrelated)
        out[mode] = {
            "ranking_accuracy": ts.ranking_accuracy,
            "related": {"min": float(ts.related.min()), "mean": float(ts.related.mean()), "max": float(ts.related.max())},
            "unrelated": {"min": float(ts.unrelated.min()), "mean": float(ts.unrelated.mean()), "max": float(ts.unrelated.max())},
            "paper_thresholds": tier_rates(ts, *PAPER),
            "calibrated_thresholds": {**tier_rates(ts, fit.tau_low, fit.tau_high), "fit_on_calibration": fit.to_dict()},
        }
        hists[mode] = (ts.related.tolist(), ts.unrelated.tolist(), fit.tau_low)
    cfg = model.config
    if cfg.extra.get("calibration"):
        c = torch.tensor(cfg.latent_center) if cfg.latent_center is not None and cfg.latent_centering == "fixed" else None
        ts = test.scores(c)
        out["own_config"] = {"centering": cfg.latent_centering, **tier_rates(ts, cfg.tau_low, cfg.tau_high)}
    return out, hists


def plot(hists: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(hists)
    fig, axes = plt.subplots(len(labels), 2, figsize=(9, 2.6 * len(labels)), squeeze=False)
    for row, label in enumerate(labels):
        for col, mode in enumerate(("raw", "centred")):
            rel, unrel, tau = hists[label][mode]
            ax = axes[row][col]
            bins = torch.linspace(min(rel + unrel), max(rel + unrel), 30).tolist()
            ax.hist(rel, bins=bins, alpha=0.6, label="needing query")
            ax.hist(unrel, bins=bins, alpha=0.6, label="unrelated query")
            ax.axvline(tau, color="k", ls="--", lw=1, label=f"calibrated τ_low={tau:.3f}")
            if min(rel + unrel) <= PAPER[0] <= max(rel + unrel):
                ax.axvline(PAPER[0], color="r", ls=":", lw=1, label="paper τ_low=0.5")
            ax.set_title(f"{label}: {mode} cosine", fontsize=9)
            ax.legend(fontsize=6)
    fig.suptitle("held-apart triples: max-cosine score of the reply vs each query (SmolLM2-135M)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="LABEL=PATH", help="'fresh' = untrained adapters")
    p.add_argument("--shipped", default=None, help="label whose own rhea_config.json thresholds are the acceptance test")
    p.add_argument("--n-cal", type=int, default=DEFAULT_N_CALIBRATION)
    p.add_argument("--n-test", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/tiers")
    args = p.parse_args()
    torch.set_num_threads(1)
    from rhea.calibration.data import triples

    cal_triples = triples("calibrate", args.n_cal, seed=args.seed)
    test_triples = triples("heldout", args.n_test, seed=args.seed + 1)
    results, hists, t0 = {}, {}, time.perf_counter()
    for spec in args.model:
        label, _, path = spec.partition("=")
        model = load(path)
        results[label], hists[label] = evaluate(model, cal_triples, test_triples)
        results[label]["path"] = path
        results[label]["training"] = model.config.extra.get("training")
        del model
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"n_calibration_triples": args.n_cal, "n_heldout_triples": args.n_test, "seed": args.seed,
               "heldout_families": sorted({t.family for t in test_triples}),
               "calibration_families": sorted({t.family for t in cal_triples}), "paper_thresholds": PAPER,
               "acceptance": None, "seconds": round(time.perf_counter() - t0, 1), "models": results}
    if args.shipped:
        summary["acceptance"] = {"model": args.shipped, **results[args.shipped].get("own_config", {"error": "not calibrated"})}
    output_file(out, ".json").write_text(json.dumps(summary, indent=2))
    plot(hists, output_file(out, ".png"))
    for label, r in results.items():
        for mode in ("raw", "centred"):
            m = r[mode]
            print(f"{label:>14} {mode:>8} rank {m['ranking_accuracy']:.2f} | paper kept {m['paper_thresholds']['kept_related']:.2f} "
                  f"dropped {m['paper_thresholds']['dropped_unrelated']:.2f} | calibrated kept "
                  f"{m['calibrated_thresholds']['kept_related']:.2f} dropped {m['calibrated_thresholds']['dropped_unrelated']:.2f}")
        if "own_config" in r:
            print(f"{label:>14} own config: {r['own_config']}")


if __name__ == "__main__":
    main()
