"""`rhea calibrate`: fit τ_low/τ_high (and the latent centre) of a Rhea model on calibration triples.

    rhea calibrate --model runs/x/final                    # writes into runs/x/final/rhea_config.json
    rhea calibrate --model smollm2-135m --out my-rhea      # fresh adapters: saved to my-rhea with the fit
"""
from __future__ import annotations

import json
import os

from rhea.calibration.data import DEFAULT_N_CALIBRATION, TRIPLES_PER_FAMILY, CalibrationDataError


def calibrate_model(model, triples, *, keep: float = 0.9, drop: float = 0.8, raw: float = 0.5,
                    centering: str = "auto") -> dict:
    """Fit thresholds on `triples` and set them on ``model.config``; returns the fit report.

    `centering`: "none" (raw cosine), "fixed" (subtract the calibration triples' mean latent),
    or "auto": fit both and keep the one whose thresholds *transfer* best to unseen topics —
    leave-one-family-out on the calibration triples (fit on the other families, measure
    keep/drop on the left-out one; score = mean over folds of the worst slack against the
    targets), ties broken by the gap between the related and unrelated score quantiles.
    In each fold the centre, too, comes from the other families only: a centre that has seen
    the left-out family would flatter centred cosine on "unseen" topics.
    """
    from rhea.calibration.fit import CalibrationError, encode_triples, fit_thresholds

    if centering not in ("auto", "fixed", "none"):
        raise CalibrationError(f"centering={centering!r} must be 'auto', 'fixed' or 'none'")
    lat = encode_triples(model, triples)
    center = lat.mean()
    fits = {}
    for mode in (("none", "fixed") if centering == "auto" else (centering,)):
        s = lat.scores(center if mode == "fixed" else None)
        fit = fit_thresholds(s.related, s.unrelated, keep=keep, drop=drop, raw=raw)
        gap = float(s.related.quantile(1 - keep) - s.unrelated.quantile(drop))  # > 0: the targets are separable
        fits[mode] = {"fit": fit, "ranking_accuracy": s.ranking_accuracy, "margin": gap,
                      "transfer": _family_transfer(triples, lat, mode == "fixed", keep=keep, drop=drop, raw=raw)}
    best = max(fits, key=lambda m: (fits[m]["transfer"] if fits[m]["transfer"] is not None else fits[m]["fit"].targets_met - 1,
                                    fits[m]["margin"]))
    fit = fits[best]["fit"]
    cfg = model.config
    cfg.tau_low, cfg.tau_high = fit.tau_low, fit.tau_high
    cfg.latent_center = [round(float(x), 6) for x in center] if best == "fixed" else None
    cfg.latent_centering = "fixed" if best == "fixed" else "none"
    cfg.validate()
    report = {"centering": best, "n_triples": len(triples), "targets": {"keep": keep, "drop": drop, "raw": raw},
              **{m: {**f["fit"].to_dict(), "ranking_accuracy": f["ranking_accuracy"], "margin": f["margin"],
                     "family_transfer": f["transfer"]}
                 for m, f in fits.items()}}
    cfg.extra["calibration"] = report
    return report


def _family_transfer(triples, lat, centred: bool, *, keep: float, drop: float, raw: float) -> float | None:
    """Leave-one-family-out: mean over families of min(kept - keep, dropped - drop) on the left-out
    family under thresholds (and, if `centred`, a centre) fitted on the others; None with fewer
    than 2 families."""
    import torch

    from rhea.calibration.fit import fit_thresholds

    families = sorted({t.family for t in triples})
    if len(families) < 2:
        return None
    slacks = []
    for fam in families:
        out = torch.tensor([t.family == fam for t in triples])
        if out.all() or (~out).sum() < 2:
            return None
        rest = lat.subset(~out)
        center = rest.mean() if centred else None
        fitted, left_out = rest.scores(center), lat.subset(out).scores(center)
        fit = fit_thresholds(fitted.related, fitted.unrelated, keep=keep, drop=drop, raw=raw)
        kept, dropped = left_out.tier_accuracy(fit.tau_low)
        slacks.append(min(kept - keep, dropped - drop))
    return sum(slacks) / len(slacks)


def _cmd_calibrate(args) -> int:
    from rhea.calibration.data import read_triples_jsonl, triples
    from rhea.modeling.config import CONFIG_NAME
    from rhea.modeling.loading import load_rhea_model

    is_dir = os.path.isfile(os.path.join(args.model, CONFIG_NAME))
    if not is_dir and not args.out:
        raise CalibrationDataError(
            f"--model {args.model!r} is not a Rhea directory (no {CONFIG_NAME}), so there is nowhere to write the "
            "thresholds; pass --out DIR to save the model with them"
        )
    if args.out:
        from rhea.storage import StorageError, check_writable_directory

        try:
            check_writable_directory(args.out, "--out")  # before the model loads and the fit runs
        except StorageError as e:
            raise CalibrationDataError(str(e)) from None
    data = read_triples_jsonl(args.triples) if args.triples else triples("calibrate", args.n, seed=args.seed)
    model = load_rhea_model(args.model, device=args.device).eval()
    report = calibrate_model(model, data, keep=args.keep, drop=args.drop, raw=args.raw, centering=args.centering)
    if args.out:
        model.save_pretrained(args.out)
        target = args.out
    else:
        model.config.save(args.model)  # only rhea_config.json changes; the weights are untouched
        from rhea.modeling.card import write_model_card

        write_model_card(args.model)  # and the card that describes it
        target = args.model
    print(json.dumps({"written": os.path.join(target, CONFIG_NAME), "tau_low": model.config.tau_low,
                      "tau_high": model.config.tau_high, **report}, indent=2))
    chosen = report[report["centering"]]
    if not chosen["targets_met"]:
        print(f"warning: targets not met on the calibration triples (kept {chosen['keep_rate']:.0%} of related, "
              f"dropped {chosen['drop_rate']:.0%} of unrelated); the model's latents do not separate them: train with "
              "run.contrastive_weight > 0")
    return 0


def register(sub) -> None:
    from rhea.modeling.loading import add_device_argument

    p = sub.add_parser(
        "calibrate",
        help="fit the HCR thresholds tau_low/tau_high (and the latent centre) of a Rhea model",
        description="Score (reply, needing query, unrelated query) triples with the model's compress adapter and fit "
        "tau_low so that --keep of needed replies are kept and --drop of unrelated ones are dropped, and tau_high so "
        "that --raw of needed replies stay raw text. Writes rhea_config.json. By default the triples are the "
        "project's own calibration split (rhea.calibration.data), disjoint from training and the benchmark.",
    )
    p.add_argument("--model", required=True, help="Rhea directory (save_pretrained), model-zoo name or base model path")
    add_device_argument(p)
    p.add_argument("--out", default=None, help="save the calibrated model here (required unless --model is a Rhea directory)")
    p.add_argument("--triples", default=None, help="JSONL with reply/query/unrelated per line (default: generated)")
    from rhea.modeling.loading import int_at_least, number_in

    p.add_argument("--n", type=int_at_least(1, "generated calibration triples", 1_000_000), default=DEFAULT_N_CALIBRATION,
                   help=f"generated calibration triples (default {DEFAULT_N_CALIBRATION}: {TRIPLES_PER_FAMILY} per calibration family)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", type=number_in(0, 1, "a share"), default=0.9, help="target share of needed replies kept (not dropped)")
    p.add_argument("--drop", type=number_in(0, 1, "a share"), default=0.8, help="target share of unrelated replies dropped")
    p.add_argument("--raw", type=number_in(0, 1, "a share"), default=0.5, help="share of needed replies above tau_high (raw text)")
    p.add_argument("--centering", choices=["auto", "fixed", "none"], default="auto",
                   help="subtract the calibration mean latent (fixed), not (none), or pick the better (auto)")
    p.set_defaults(func=_cmd_calibrate)
