"""`RheaConfig`: plain data with the paper's defaults, validated at construction."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from rhea.errors import RheaConfigError

CONFIG_NAME = "rhea_config.json"
#: values of `RheaConfig.latent_injection`
LATENT_INJECTIONS = ("raw", "norm", "projector", "deep", "states")

#: how the Rhea policy scores past turns, and how scores become tiers (see rhea.memory.scoring)
SCORERS = ("latent", "bm25", "dense", "fused")
COMPONENTS = ("latent", "bm25", "dense")
FUSIONS = ("rrf", "zsum")
TIER_MODES = ("threshold", "budget")
LATENT_TIER_MODES = ("auto", "on", "off")
#: what a kept plan does when it hides one of the query's best turns (RheaConfig.replan_hidden)
REPLAN_HIDDEN = ("recall", "replan")

#: the compressor passes when reconstruction token accuracy is at least this, with own latents
#: beating another text's latents (control gap > 0): below it a latent carries too little of its
#: reply to stand in for it, so the latent tier is off unless the user asks for it.
FIDELITY_MIN_TOKEN_ACC = 0.9
FIDELITY_MIN_CONTROL_GAP = 0.0
#: where the fidelity also records fact recall (questions about a reply answered with the reply as text, as
#: latents, or dropped: benchmarks/fact_recall.py on a model that can answer them), the latents must carry
#: the facts too: latent >= FACT_RECALL_MIN_RATIO x raw and latent >= dropped + FACT_RECALL_MIN_MARGIN
#: (`fact_recall_passes`). Reconstruction alone can pass while the answers through the latents are invented:
#: Qwen2.5-Coder-1.5B's shipped compressor reconstructs 0.96 of held-apart tokens but answers 0.42 of the facts
#: (raw 0.80), and with its latents in the prompt state-tracking answers turned into generic values
#: (docs/reports/quality.md, "Eight episodes: state tracking")
FACT_RECALL_MIN_RATIO = 0.6
FACT_RECALL_MIN_MARGIN = 0.25
FACT_RECALL_KEYS = ("latent", "raw", "dropped", "n", "measured_on")


def fact_recall_passes(fact_recall: Mapping) -> bool:
    """Whether a recorded fact recall shows the latents carrying the facts: latent >= `FACT_RECALL_MIN_RATIO`
    x raw and latent >= dropped + `FACT_RECALL_MIN_MARGIN` (accuracies in [0, 1], point estimates).

    >>> fact_recall_passes({"latent": 0.42, "raw": 0.80, "dropped": 0.02, "n": 60, "measured_on": "x"})
    False
    >>> fact_recall_passes({"latent": 0.50, "raw": 0.80, "dropped": 0.02, "n": 60, "measured_on": "x"})
    True
    """
    lat, raw, drop = (float(fact_recall[k]) for k in ("latent", "raw", "dropped"))
    return lat >= FACT_RECALL_MIN_RATIO * raw and lat >= drop + FACT_RECALL_MIN_MARGIN


def fidelity_passes(fidelity: Mapping | None) -> bool:
    """Whether a recorded compressor fidelity meets the target (`FIDELITY_MIN_TOKEN_ACC`, control gap > 0,
    and `fact_recall_passes` where ``fidelity["fact_recall"]`` is recorded).

    >>> fidelity_passes({"reconstruction_token_acc": 0.95, "control_gap": 0.3, "measured_on": "x", "n": 100})
    True
    >>> fidelity_passes({"reconstruction_token_acc": 0.40, "control_gap": 0.0, "measured_on": "x", "n": 24})
    False
    >>> fidelity_passes(None)
    False
    """
    if not fidelity:
        return False
    acc, gap = fidelity.get("reconstruction_token_acc"), fidelity.get("control_gap")
    if acc is None or gap is None:
        return False
    facts = fidelity.get("fact_recall")
    return (float(acc) >= FIDELITY_MIN_TOKEN_ACC and float(gap) > FIDELITY_MIN_CONTROL_GAP
            and (facts is None or fact_recall_passes(facts)))


def latent_tier_active(setting: str, fidelity: Mapping | None) -> tuple[bool, str]:
    """(latent tier on?, why) for ``RheaConfig.latent_tier`` and the recorded `fidelity`."""
    if setting not in LATENT_TIER_MODES:
        raise RheaConfigError(f"latent_tier={setting!r} must be one of {LATENT_TIER_MODES}")
    if setting == "on":
        return True, "latent tier on: asked for explicitly (latent_tier='on')"
    if setting == "off":
        return False, "latent tier off: asked for explicitly (latent_tier='off')"
    target = f"token acc >= {FIDELITY_MIN_TOKEN_ACC} with a positive control gap"
    if not fidelity:
        return False, f"latent tier off: no measured compressor fidelity in rhea_config.json (target: {target})"
    acc, gap = fidelity.get("reconstruction_token_acc"), fidelity.get("control_gap")
    measured = f"reconstruction token acc {acc}, control gap {gap}"
    facts = fidelity.get("fact_recall")
    if facts is not None:
        target += (f"; fact recall latent >= {FACT_RECALL_MIN_RATIO} x raw and >= dropped + "
                   f"{FACT_RECALL_MIN_MARGIN}")
        measured += (f"; fact recall latent {facts['latent']:.2f}, raw {facts['raw']:.2f}, "
                     f"dropped {facts['dropped']:.2f} (n = {facts['n']})")
    if fidelity_passes(fidelity):
        return True, f"latent tier on: compressor fidelity {measured} meets the target ({target})"
    return False, f"latent tier off: compressor fidelity {measured} is below the target ({target})"


def check_thresholds(tau_low: float, tau_high: float) -> None:
    """HCR's thresholds must be ordered: a turn scoring above tau_high is raw, below tau_low dropped.

    >>> check_thresholds(0.9, 0.8)
    Traceback (most recent call last):
    ...
    rhea.errors.RheaConfigError: tau_low=0.9 must be <= tau_high=0.8
    """
    if not tau_low <= tau_high:
        raise RheaConfigError(f"tau_low={tau_low} must be <= tau_high={tau_high}")


def check_replan(every, top, hidden) -> None:
    """`replan_every` >= 1, `replan_top` >= 0 and `replan_hidden` one of REPLAN_HIDDEN (RheaConfig and RheaPolicy).

    >>> check_replan(0, 10, "recall")
    Traceback (most recent call last):
    ...
    rhea.errors.RheaConfigError: replan_every=0 must be an int >= 1 (1 = re-plan every turn)
    """
    whole = lambda v, least: isinstance(v, int) and not isinstance(v, bool) and v >= least  # noqa: E731
    if not whole(every, 1):
        raise RheaConfigError(f"replan_every={every!r} must be an int >= 1 (1 = re-plan every turn)")
    if not whole(top, 0):
        raise RheaConfigError(f"replan_top={top!r} must be an int >= 0 (0 = no check)")
    if hidden not in REPLAN_HIDDEN:
        raise RheaConfigError(f"replan_hidden={hidden!r} must be one of {REPLAN_HIDDEN}")


@dataclass
class RheaConfig:
    """Hyper-parameters of a Rhea model (defaults follow the paper).

    >>> RheaConfig(n_mem=8).tau_high
    0.8
    >>> RheaConfig(tau_low=0.9, tau_high=0.8)
    Traceback (most recent call last):
    ...
    rhea.errors.RheaConfigError: tau_low=0.9 must be <= tau_high=0.8
    """

    #: latent vectors per compressed reply (`<mem>` read-out slots)
    n_mem: int = 8
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    #: PEFT target modules: "all-linear" or a list of module names
    target_modules: str | list[str] = "all-linear"
    #: HCR thresholds: score < tau_low → drop, > tau_high → raw text, else latent
    tau_low: float = 0.5
    tau_high: float = 0.8
    #: additive attention bias on the instruction-prefix keys (0 = plain causal attention)
    anchor_bias: float = 0.0
    #: subtract this mean latent before cosine scoring (None = raw cosine, the paper's rule); `rhea calibrate` fits it
    latent_center: list[float] | None = None
    #: "fixed" (default: subtract latent_center when set, else raw cosine), "running" (subtract the running mean of
    #: the session's latents; no calibration needed) or "none" (raw cosine, the paper's rule, even with a centre)
    latent_centering: str = "fixed"
    #: how past turns are ranked: "latent" (HCR max-cosine of the <mem> latents), "bm25", "dense" (all-MiniLM-L6-v2
    #: cosine of the turn's text) or "fused" (the `fusion_components` combined by `fusion`); see rhea.memory.scoring
    scorer: str = "fused"
    #: "rrf" (reciprocal-rank fusion, sum of w / (rrf_k + rank)) or "zsum" (per-query standardised scores, weighted sum)
    fusion: str = "zsum"
    fusion_components: list[str] = field(default_factory=lambda: ["dense", "bm25"])
    #: one weight per fusion component (None = all 1.0)
    fusion_weights: list[float] | None = None
    rrf_k: float = 60.0
    #: dense-cosine floor (a turn below every component's floor is dropped) and raw-text ceiling (threshold mode)
    dense_floor: float = 0.05
    dense_high: float = 0.6
    #: "budget": the best `max_raw` turns that pass a floor are raw text, the next `max_latent` latents, the rest
    #: dropped (bounded cost per turn); "threshold": the paper's HCR (floors drop, ceilings keep raw, the rest latent)
    tier_mode: str = "budget"
    #: 10 raw + 8 latent (+ the last `recent_raw`), with a kept plan's hidden best turns recalled (`replan_top`): on
    #: histories of 300+ turns (multi-session QA, TopiOCQA) the needed turn is in the context for every one of 40
    #: questions at 0.11-0.12x the history's tokens on Qwen2.5-Coder-1.5B and SmolLM2-135M (docs/reports/quality.md,
    #: "Long histories")
    max_raw: int = 10
    max_latent: int = 8
    #: the last `recent_raw` turns are raw text whatever their scores (budget mode: on top of `max_raw`); 3 measured
    #: best on real conversations (docs/reports/quality.md, Retrieval): it keeps the needed turn when it is recent
    recent_raw: int = 3
    #: re-decide the earlier turns' tiers at most every `replan_every` queries (1 = every query, the paper's HCR; also
    #: after that many turns added without a query, e.g. caught up); in between, the last plan's tiers stay and newer turns are appended raw, so the prompt only grows and the
    #: session's prefix KV cache reuses it (docs/guides/sessions-and-policies.md, "Re-planning every few turns"). A change of the
    #: instruction block re-plans at once. 8: on Qwen2.5-Coder-1.5B it prefills 2.4x fewer tokens
    #: a turn than per-turn plans with IAR and state-tracking accuracy within their paired intervals
    replan_every: int = 8
    #: while a plan is kept (`replan_every` > 1), the query is still scored, and a fresh plan is made at once when one
    #: of its `replan_top` best turns that the fresh plan shows raw is not raw under the kept plan (0 = keep the plan
    #: whatever the query needs, for `replan_every` turns)
    replan_top: int = 10
    #: what a kept plan does with those hidden best turns: "recall" (default: show them raw after the newest turn,
    #: right before the query, and keep each copy there until the next fresh plan, so every prompt extends the last)
    #: or "replan" (make a fresh plan now)
    replan_hidden: str = "recall"
    #: compress a reply in consecutive pieces of at most this many tokens, `n_mem` latents each (ICAE's long-context
    #: use; a turn's latent then holds ceil(tokens / compress_chunk_tokens) x n_mem rows), so a compressor trained on
    #: chunks of this length sees replies of the length it was trained and measured on; None = the whole reply into
    #: one block of `n_mem` (docs/reports/compressor.md, "Whole replies")
    compress_chunk_tokens: int | None = None
    #: an order signal for a reply compressed in pieces: P learned offsets, one per piece index, added to the `<mem>`
    #: read-out queries of piece i (piece i >= P uses offset P - 1), so the blocks of one reply differ by where the
    #: piece sits, not only by its words; 0 = none (every piece compressed as if it were the first; docs/reports/compressor.md,
    #: "Whole replies"). Only read when replies are compressed in pieces (`compress_chunk_tokens`)
    compress_piece_embeddings: int = 0
    #: "auto": the latent tier is on only when `fidelity` meets the target (rhea.memory.scoring); "on" / "off" force it
    latent_tier: str = "auto"
    #: the compressor's measured reconstruction fidelity: {"reconstruction_token_acc": float, "control_gap": float,
    #: "measured_on": str, "n": int}, optionally with "fact_recall": {"latent", "raw", "dropped": accuracies,
    #: "n": items, "measured_on": str} (then the latents must also carry the facts); None = not measured
    fidelity: dict[str, Any] | None = None
    #: id or local path of the base model; model-zoo names (e.g. "smollm2-135m") work too
    base_model: str | None = None
    #: recorded at save time so loading onto a different base fails clearly
    base_hidden_size: int | None = None
    base_vocab_size: int | None = None
    #: how latents enter the generate pass: "raw" (final hidden states as they are; adapters saved before this
    #: option), "norm" (subtract a learned centre, rescale each slot to the token-embedding norm) or "projector"
    #: ("norm" followed by a learned linear map into the embedding space, identity-initialised) or "deep"
    #: ("projector", plus a per-layer low-rank term of the latent added to every decoder layer's input
    #: at the slots, zero at initialisation: each layer's keys/values at a slot read the latent; docs/reports/compressor.md)
    #: or "states" (the compress pass's own hidden state at each `<mem>` slot, at the input of every decoder
    #: layer, is stored with the latent and replaces the generate pass's slot state at that layer, as
    #: 500xCompressor hands the decoder the compressed tokens' per-layer K/V; the latent is then
    #: ``[n_mem, n_layers * hidden]``, its first ``hidden`` columns the final states used for scoring)
    latent_injection: str = "raw"
    #: a learned linear read-out for retrieval (`rhea.modeling.score_head`, trained by scripts/train_score_head.py):
    #: 0 = none (turns are scored on the latents' final states as they are); d > 0 = `score_head_layers` of each
    #: latent are mapped to d dimensions before the max-cosine scoring (score_head.safetensors holds the map)
    score_head: int = 0
    #: the latent blocks the score head reads: 0 = the final states; i >= 1 = under latent_injection="states", the
    #: slot's state at the input of decoder layer i
    score_head_layers: list[int] = field(default_factory=lambda: [0])
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        try:
            self._validate()
        except TypeError as e:  # a field of a type no check expected (e.g. null where a number goes)
            raise RheaConfigError(f"a RheaConfig field has the wrong type ({e}); compare rhea_config.json with the "
                                  "field types of rhea.modeling.RheaConfig") from None

    def _validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise RheaConfigError(msg)

        def number(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        def optional_int(v) -> bool:
            return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)

        need(isinstance(self.n_mem, int) and not isinstance(self.n_mem, bool) and 1 <= self.n_mem <= 512,
             f"n_mem={self.n_mem!r} must be an int in [1, 512]")
        need(isinstance(self.lora_r, int) and self.lora_r >= 1, f"lora_r={self.lora_r!r} must be an int >= 1")
        need(number(self.lora_alpha) and self.lora_alpha > 0, f"lora_alpha={self.lora_alpha!r} must be a number > 0")
        need(number(self.lora_dropout) and 0.0 <= self.lora_dropout < 1.0,
             f"lora_dropout={self.lora_dropout!r} must be a number in [0, 1)")
        need(self.base_model is None or (isinstance(self.base_model, str) and self.base_model.strip() != ""),
             f"base_model={self.base_model!r} must be a model-zoo name, a path or a hub id (a non-empty string), or null")
        for name in ("base_hidden_size", "base_vocab_size"):
            need(optional_int(getattr(self, name)), f"{name}={getattr(self, name)!r} must be null or an int >= 1")
        need(isinstance(self.extra, dict), f"extra={self.extra!r} must be a JSON object")
        need(isinstance(self.target_modules, (str, list)) and len(self.target_modules) > 0,
             f"target_modules={self.target_modules!r} must be 'all-linear' or a non-empty list of module names")
        for name in ("tau_low", "tau_high"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and -1.0 <= v <= 1.0,
                 f"{name}={v!r} must be a cosine threshold in [-1, 1]")
        check_thresholds(self.tau_low, self.tau_high)
        need(isinstance(self.anchor_bias, (int, float)) and self.anchor_bias >= 0.0,
             f"anchor_bias={self.anchor_bias!r} must be a float >= 0")
        need(self.latent_centering in ("fixed", "running", "none"),
             f"latent_centering={self.latent_centering!r} must be 'fixed', 'running' or 'none'")
        need(self.scorer in SCORERS, f"scorer={self.scorer!r} must be one of {SCORERS}")
        need(self.fusion in FUSIONS, f"fusion={self.fusion!r} must be one of {FUSIONS}")
        need(isinstance(self.fusion_components, list) and len(self.fusion_components) > 0
             and all(c in COMPONENTS for c in self.fusion_components)
             and len(set(self.fusion_components)) == len(self.fusion_components),
             f"fusion_components={self.fusion_components!r} must be a non-empty list of distinct names from {COMPONENTS}")
        need(self.fusion_weights is None or (isinstance(self.fusion_weights, list)
                                             and len(self.fusion_weights) == len(self.fusion_components)
                                             and all(isinstance(w, (int, float)) and w >= 0 for w in self.fusion_weights)),
             f"fusion_weights={self.fusion_weights!r} must be None or one weight >= 0 per fusion component "
             f"({len(self.fusion_components)})")
        need(isinstance(self.rrf_k, (int, float)) and self.rrf_k >= 0, f"rrf_k={self.rrf_k!r} must be a number >= 0")
        for name in ("dense_floor", "dense_high"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and -1.0 <= v <= 1.0, f"{name}={v!r} must be a cosine in [-1, 1]")
        need(self.dense_floor <= self.dense_high, f"dense_floor={self.dense_floor} must be <= dense_high={self.dense_high}")
        need(self.tier_mode in TIER_MODES, f"tier_mode={self.tier_mode!r} must be one of {TIER_MODES}")
        for name in ("max_raw", "max_latent", "recent_raw"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"{name}={v!r} must be an int >= 0")
        check_replan(self.replan_every, self.replan_top, self.replan_hidden)
        need(self.compress_chunk_tokens is None or (isinstance(self.compress_chunk_tokens, int)
                                                    and not isinstance(self.compress_chunk_tokens, bool)
                                                    and self.compress_chunk_tokens >= 1),
             f"compress_chunk_tokens={self.compress_chunk_tokens!r} must be None (whole replies) or an int >= 1, "
             "e.g. the --chunk-tokens the compressor was trained with")
        need(isinstance(self.compress_piece_embeddings, int) and not isinstance(self.compress_piece_embeddings, bool)
             and self.compress_piece_embeddings >= 0,
             f"compress_piece_embeddings={self.compress_piece_embeddings!r} must be an int >= 0 (0 = no order signal)")
        need(self.latent_tier in LATENT_TIER_MODES, f"latent_tier={self.latent_tier!r} must be one of {LATENT_TIER_MODES}")
        if self.fidelity is not None:
            f = self.fidelity
            need(isinstance(f, dict) and isinstance(f.get("reconstruction_token_acc"), (int, float))
                 and isinstance(f.get("control_gap"), (int, float)),
                 "fidelity must be None or {'reconstruction_token_acc': float, 'control_gap': float, 'measured_on': str, "
                 f"'n': int}}, got {f!r}")
            facts = f.get("fact_recall")
            need(facts is None or (isinstance(facts, dict) and set(FACT_RECALL_KEYS) <= set(facts) and all(
                isinstance(facts[k], (int, float)) and not isinstance(facts[k], bool) and 0 <= facts[k] <= 1
                for k in ("latent", "raw", "dropped")) and isinstance(facts["n"], int) and facts["n"] > 0),
                 "fidelity['fact_recall'] must be {'latent': accuracy, 'raw': accuracy, 'dropped': accuracy (each in "
                 f"[0, 1]), 'n': items > 0, 'measured_on': str}} (benchmarks/fact_recall.py), got {facts!r}")
        need(self.latent_injection in LATENT_INJECTIONS,
             f"latent_injection={self.latent_injection!r} must be one of {list(LATENT_INJECTIONS)}")
        if self.latent_center is not None:
            need(isinstance(self.latent_center, list) and len(self.latent_center) > 0,
                 "latent_center must be None or a non-empty list of floats (one per hidden unit)")
        need(isinstance(self.score_head, int) and not isinstance(self.score_head, bool) and self.score_head >= 0,
             f"score_head={self.score_head!r} must be an int >= 0 (0 = no learned read-out)")
        layers = self.score_head_layers
        need(isinstance(layers, list) and len(layers) > 0 and len(set(layers)) == len(layers)
             and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers),
             f"score_head_layers={layers!r} must be a non-empty list of distinct ints >= 0 (0 = the final states)")
        need(self.latent_injection == "states" or layers == [0],
             f"score_head_layers={layers!r} reads per-layer slot states, which only latent_injection='states' "
             f"stores (this config has {self.latent_injection!r}); use [0], the final states")
        if self.latent_center is not None and self.score_head:
            need(len(self.latent_center) == self.score_head,
                 f"latent_center has {len(self.latent_center)} values but the score head outputs {self.score_head}; "
                 "run `rhea calibrate` again after training a score head")

    # --- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RheaConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RheaConfigError(f"unknown RheaConfig field(s) {unknown}; known fields: {sorted(known)}")
        if isinstance(data.get("extra"), dict) and "active_mode" in data["extra"]:
            # written by save() for readers; recomputed from the fields, so it never goes stale
            data = {**data, "extra": {k: v for k, v in data["extra"].items() if k != "active_mode"}}
        return cls(**data)

    def active_mode(self) -> dict[str, Any]:
        """How this config retrieves past turns, and whether its latent tier is on (and why)."""
        on, why = latent_tier_active(self.latent_tier, self.fidelity)
        return {"scorer": self.scorer, "tier_mode": self.tier_mode, "latent_tier": on, "reason": why}

    def save(self, directory: str | os.PathLike) -> str:
        path = os.path.join(directory, CONFIG_NAME)
        data = self.to_dict()
        data["extra"] = {**data["extra"], "active_mode": self.active_mode()}  # for readers; recomputed on load
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        from rhea.modeling.manifest import record_files

        record_files(directory, [CONFIG_NAME])  # a saved directory's manifest keeps the new digest
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "RheaConfig":
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise RheaConfigError(f"{path} not found: is {directory!s} a directory written by RheaForCausalLM.save_pretrained?")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except UnicodeDecodeError as e:
            raise RheaConfigError(f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                                  "re-save the model or restore the file") from None
        except RecursionError:
            raise RheaConfigError(f"{path} nests objects or arrays too deeply to read; re-save the model or restore "
                                  "the file") from None
        except ValueError as e:  # invalid JSON, or an integer of more digits than Python converts
            raise RheaConfigError(f"{path} is not valid JSON ({e}); re-save the model or restore the file") from None
        if not isinstance(data, dict):
            raise RheaConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)
