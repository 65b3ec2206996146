"""The model card (``README.md``) of a Rhea directory, written from what the directory holds.

`RheaForCausalLM.save_pretrained` lets PEFT save the two adapters, and PEFT writes its own
template card ("More Information Needed" in every field). That card says nothing true about a
Rhea directory, so `save_pretrained` replaces it with `write_model_card`: the base model, how to
load it, each adapter's LoRA settings, how latents enter the generate pass, the retrieval settings,
the compressor's measured fidelity and whether the latent tier is on, the calibration and the
training recorded in ``rhea_config.json``, and the files. Everything is read from the directory
(``rhea_config.json`` and each adapter's ``adapter_config.json``), so ``python -m rhea.modeling.card
DIR`` rewrites the card of a directory saved before this existed.

>>> from rhea.modeling.config import RheaConfig
>>> card = model_card(RheaConfig(base_model="smollm2-135m"), {"compress": {"r": 8, "lora_alpha": 16,
...     "target_modules": ["q_proj", "v_proj"]}})
>>> card.splitlines()[1], "RheaForCausalLM.from_pretrained" in card, "More Information Needed" in card
('base_model: smollm2-135m', True, False)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping

from rhea.modeling.config import (CONFIG_NAME, FACT_RECALL_MIN_MARGIN, FACT_RECALL_MIN_RATIO, FIDELITY_MIN_TOKEN_ACC,
                                  RheaConfig)
from rhea.modeling.manifest import record_files

CARD_NAME = "README.md"

_FILES = (
    (CONFIG_NAME, "every Rhea setting (`RheaConfig`), the measured fidelity, calibration and training record"),
    ("mem_tokens.safetensors", "the `<mem>` read-out queries and the `<mem>` token's embedding row"),
    ("latent_injector.safetensors", "the learned map that writes latents into the generate pass"),
    ("score_head.safetensors", "the learned retrieval read-out: latents -> the vectors HCR scores"),
    ("tokenizer/", "the base tokenizer with the added `<mem>` token"),
    ("tokenizer_changes.json", "what rhea changes in the base model's tokenizer (the added `<mem>` token), "
                               "applied to the installed base tokenizer at load"),
    ("compress/", "the compress LoRA (PEFT): a reply -> `n_mem` latents"),
    ("generate/", "the generate LoRA (PEFT): answers from the hybrid context"),
    ("rhea_manifest.json", "the SHA-256 of every file above, checked before the directory is loaded"),
)


def _num(v: Any) -> Any:
    """Floats to 3 significant digits for reading (0.3551 -> 0.355, -0.0002 stays -0.0002); anything else as is."""
    return float(f"{v:.3g}") if isinstance(v, float) else v


def _targets(cfg: Mapping[str, Any]) -> str:
    t = cfg.get("target_modules")
    if isinstance(t, (list, tuple, set)):
        return ", ".join(sorted(t))
    return str(t)


def _adapter_rows(adapters: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = ["| adapter | rank | alpha | target modules |", "|---|---|---|---|"]
    for name, cfg in adapters.items():
        rows.append(f"| {name} | {cfg.get('r', '?')} | {cfg.get('lora_alpha', '?')} | {_targets(cfg)} |")
    return rows


def _score_head_lines(config: RheaConfig, extra: Mapping[str, Any]) -> list[str]:
    if not config.score_head:
        return ["* latent scores read the final states as they are (no learned read-out)"]
    line = (f"* latent scores read a learned head: blocks {config.score_head_layers} -> {config.score_head} dims "
            "(`scripts/train_score_head.py`)")
    rec = extra.get("score_head")
    if isinstance(rec, Mapping) and rec.get("held_apart_after"):
        before, after = rec.get("held_apart_before", {}), rec["held_apart_after"]
        n = (rec.get("pairs") or {}).get("held_apart", "?")
        line += (f"; held-apart question -> reply R@1 {_num(before.get('R@1'))} -> {_num(after.get('R@1'))}, "
                 f"R@5 {_num(before.get('R@5'))} -> {_num(after.get('R@5'))} ({n} pairs)")
    return [line]


def _fidelity_lines(config: RheaConfig) -> list[str]:
    mode = config.active_mode()
    fid = config.fidelity
    if fid:  # the accuracy as recorded: 0.8998 rounded for reading would read as the 0.9 target it misses
        lines = [f"Reconstruction of held-apart text from its latents (teacher-forced token accuracy): "
                 f"**{fid.get('reconstruction_token_acc')}**; own latents minus another text's (control gap): "
                 f"**{_num(fid.get('control_gap'))}**; n = {fid.get('n')}. Measured on: {fid.get('measured_on')}."]
        facts = fid.get("fact_recall")
        if facts:
            lines += ["", f"Fact recall (greedy answers to questions about held-apart replies, n = {facts.get('n')}): "
                          f"reply as latents **{_num(facts.get('latent'))}**, as text {_num(facts.get('raw'))}, dropped "
                          f"{_num(facts.get('dropped'))}. Measured by: {facts.get('measured_on')}."]
    else:
        lines = ["No compressor fidelity is recorded (`benchmarks/reconstruction.py --write-fidelity` measures it)."]
    lines.append("")
    lines.append(f"Latent tier: **{mode['reason']}**. "
                 f"With `latent_tier=\"auto\"` it is on only when token accuracy is at least {FIDELITY_MIN_TOKEN_ACC} "
                 f"with a positive control gap and, where fact recall is recorded, the latents answer at least "
                 f"{FACT_RECALL_MIN_RATIO} x as often as the text and {FACT_RECALL_MIN_MARGIN} more often than dropping the "
                 "reply; otherwise turns that would be latents stay text or are dropped.")
    return lines


def _calibration_lines(extra: Mapping[str, Any]) -> list[str]:
    cal = extra.get("calibration")
    if not isinstance(cal, Mapping):
        return ["Not calibrated: `rhea calibrate --model DIR` fits `tau_low` / `tau_high` for the latent scorer."]
    used = cal.get(cal.get("centering", ""))
    used = used if isinstance(used, Mapping) else {}
    out = [f"`rhea calibrate` on {cal.get('n_triples', '?')} (reply, needing query, unrelated query) triples, "
           f"centering `{cal.get('centering', '?')}`."]
    if used:
        out.append(f"tau_low {_num(used.get('tau_low'))}, tau_high {_num(used.get('tau_high'))}; needed replies kept "
                   f"{_num(used.get('keep_rate'))}, unrelated dropped {_num(used.get('drop_rate'))}, ranking accuracy "
                   f"{_num(used.get('ranking_accuracy'))}; targets met: {used.get('targets_met')}.")
    return out


def model_card(config: RheaConfig, adapters: Mapping[str, Mapping[str, Any]], *, files: set[str] | None = None) -> str:
    """The card's text for `config` and the adapters' PEFT configs (``{"compress": {...}, "generate": {...}}``).

    `files`: names present in the directory (the file table lists only those; None lists all)."""
    base = config.base_model or "(not recorded: pass base_model= when loading)"
    extra = config.extra or {}
    trained = extra.get("adapters_trained")
    lines = [
        "---",
        f"base_model: {base}",
        "library_name: peft",
        "tags:",
        "- rhea",
        "- lora",
        "- long-conversation",
        "---",
        "",
        f"# Rhea adapters for `{base}`",
        "",
        "Rhea (the `rhea` Python package) keeps long multi-turn conversations in a hybrid context: global instructions "
        "verbatim in an instruction block, past turns as raw text, as `<mem>` latents, or dropped, by their relevance to "
        "the current message. This directory holds the two LoRA adapters Rhea runs on one frozen base model "
        "(the base weights are not included; `rhea_config.json` names the base):",
        "",
        f"* **compress**: reads a reply and writes {config.n_mem} latent vectors at its `<mem>` slots;",
        "* **generate**: answers from the assembled context, latents included.",
        "",
        f"Adapters trained: **{'yes' if trained else 'no' if trained is False else 'not recorded'}**.",
        "",
        "## Load",
        "",
        "```python",
        "from rhea.modeling import RheaForCausalLM",
        "",
        "model = RheaForCausalLM.from_pretrained(\"path/to/this/directory\")   # the base model is found by name",
        "latents = model.compress([\"an earlier reply\"])                     # [1, n_mem, latent width]",
        "```",
        "",
        "or from the shell: `rhea chat --model path/to/this/directory`.",
        "",
        "## Adapters",
        "",
        *_adapter_rows(adapters),
        "",
        "## Settings",
        "",
        f"* `<mem>` slots per reply: {config.n_mem}; latent injection: `{config.latent_injection}`",
        f"* retrieval: scorer `{config.scorer}`"
        + (f" ({config.fusion} of {', '.join(config.fusion_components)})" if config.scorer == "fused" else "")
        + f", tier mode `{config.tier_mode}`"
        + (f" (at most {config.max_raw} raw and {config.max_latent} latent turns, the last {config.recent_raw} raw)"
           if config.tier_mode == "budget" else "")
        + f"; latent thresholds tau_low {_num(config.tau_low)}, tau_high {_num(config.tau_high)}",
        *_score_head_lines(config, extra),
        "",
        "## Measured",
        "",
        *_fidelity_lines(config),
        "",
        "Calibration: " + " ".join(_calibration_lines(extra)),
    ]
    training = extra.get("training")
    if isinstance(training, Mapping) and training:
        lines += ["", "Training: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in training.items()) + "."]
    lines += ["", "## Files", "", "| file | what |", "|---|---|"]
    for name, what in _FILES:
        if files is None or name.rstrip("/") in files:
            lines.append(f"| `{name}` | {what} |")
    return "\n".join(lines) + "\n"


def write_model_card(directory: str | Path) -> Path:
    """(Re)write ``DIR/README.md`` from ``DIR/rhea_config.json`` and each adapter's ``adapter_config.json``."""
    directory = Path(directory)
    config = RheaConfig.load(directory)
    adapters = {}
    for name in ("compress", "generate"):
        path = directory / name / "adapter_config.json"
        if path.is_file():
            adapters[name] = json.loads(path.read_text(encoding="utf-8"))
    path = directory / CARD_NAME
    path.write_text(model_card(config, adapters, files={p.name for p in directory.iterdir()}), encoding="utf-8")
    record_files(directory, [CARD_NAME])  # a saved directory's manifest keeps the new digest
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m rhea.modeling.card DIR [DIR ...]  (rewrites each Rhea directory's README.md)",
              file=sys.stderr)
        return 2
    for d in args:
        print(write_model_card(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
