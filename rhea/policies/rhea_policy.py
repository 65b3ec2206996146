"""Rhea: Instructional Memory + Episodic Memory + Heuristic Context Retrieval (and its ablations).

One class covers the paper's method and the variants it is compared with, so every variant
runs the same code path and differs only in its switches:

=====================  ==========  ==================  =====================
name                   IM prefix   tiers               paper
=====================  ==========  ==================  =====================
``rhea``               yes         HCR (τ_low/τ_high)  Rhea
``rhea-no-im``         no          HCR                 Table 3 (no IM)
``rhea-all-raw``       yes         all raw             Table 4 (keep all raw)
``rhea-drop-all``      yes         all dropped         Table 4 (drop all)
``reply-soft-compress``  no        all latent          baseline
=====================  ==========  ==================  =====================
"""
from __future__ import annotations

from typing import Any

import torch

from rhea.constants import TIERS
from rhea.context.conversation import Conversation, Turn
from rhea.context.latent import Latent
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.errors import RheaConfigError, require_text
from rhea.memory.episodic import EpisodicMemory
from rhea.memory.instructional import InstructionalMemory
from rhea.memory.recognizer import InstructionRecognizer
from rhea.modeling.config import check_thresholds
from rhea.policies.assemble import assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy

FIXED_TIERS = (None, *TIERS)


@register_policy("rhea")
class RheaPolicy(ContextPolicy):
    """Rhea's hybrid context for a `RheaForCausalLM`.

    Each query first goes through the `InstructionRecognizer`; global instructions (and
    revocations) update the `InstructionalMemory`, rendered verbatim as the system block.
    Each past reply is compressed once (episodic memory); the query's latents score every
    past turn, which is then kept as text (> τ_high), as latents (τ_low..τ_high) or dropped.

    >>> from rhea.testing import tiny_rhea                                    # doctest: +SKIP
    >>> policy = RheaPolicy(tiny_rhea())                                      # doctest: +SKIP
    >>> plan = policy.build(conversation, "From now on answer in French.")   # doctest: +SKIP
    >>> plan.decisions.instructions                                           # doctest: +SKIP
    ['From now on answer in French.']
    """

    adapter = "generate"
    model_arg = "model"
    thresholds = ("tau_low", "tau_high")
    default_use_im = True
    default_fixed_tier: str | None = None

    def __init__(
        self,
        model,
        *,
        tau_low: float | None = None,
        tau_high: float | None = None,
        recognizer: InstructionRecognizer | str | None = "default",
        use_im: bool | None = None,
        fixed_tier: str | None = "default",
        tokenizer: Any = None,
    ):
        super().__init__(tokenizer=tokenizer if tokenizer is not None else getattr(model, "tokenizer", None))
        if not hasattr(model, "compress"):
            raise RheaConfigError(
                f"policy {self.name!r} needs a RheaForCausalLM (with compress/generate adapters), got {type(model).__name__}; "
                "wrap a base model with RheaForCausalLM.from_base(model, tokenizer)"
            )
        self.model = model
        cfg = model.config
        self.tau_low = cfg.tau_low if tau_low is None else float(tau_low)
        self.tau_high = cfg.tau_high if tau_high is None else float(tau_high)
        check_thresholds(self.tau_low, self.tau_high)
        self.use_im = self.default_use_im if use_im is None else bool(use_im)
        self.fixed_tier = self.default_fixed_tier if fixed_tier == "default" else fixed_tier
        if self.fixed_tier not in FIXED_TIERS:
            raise RheaConfigError(f"fixed_tier={self.fixed_tier!r} must be one of {FIXED_TIERS}")
        if isinstance(recognizer, str) or recognizer is None:
            recognizer = InstructionRecognizer(recognizer) if self.use_im else None
        self.recognizer = recognizer
        self.im = InstructionalMemory()
        center = torch.tensor(cfg.latent_center) if cfg.latent_center is not None else None
        self.episodic = EpisodicMemory(model.compress, center=center, centering=getattr(cfg, "latent_centering", "fixed"))
        self._seen_queries: set[tuple[int, str]] = set()

    def config(self) -> dict:
        return {"tau_low": self.tau_low, "tau_high": self.tau_high, "use_im": self.use_im, "fixed_tier": self.fixed_tier}

    # ---------------------------------------------------------------- turn loop
    def observe(self, turn: Turn) -> None:
        super().observe(turn)
        if self.fixed_tier not in ("raw", "drop"):  # those variants never read latents
            self.episodic.append(turn)

    def _update_instructions(self, turn_index: int, query: str) -> list[dict]:
        if not self.use_im or (turn_index, query) in self._seen_queries:
            return []
        self._seen_queries.add((turn_index, query))
        decision = self.recognizer(query)
        events = self.im.update(query, decision, turn_index)  # one-off requests are logged, never stored
        return [{"recognizer": {"kind": decision.kind, "source": decision.source, "matched": decision.matched,
                                "confidence": decision.confidence, "scope": decision.scope},
                 "im_events": [{"action": e.action, "text": e.text, "reason": e.reason} for e in events]}]

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        require_text(query, "query")
        records = self._update_instructions(len(conversation), query)
        latents: dict[int, Latent] = {}
        if self.fixed_tier in ("raw", "drop"):
            decisions = [TurnDecision(i, self.fixed_tier, None, f"variant: every turn {self.fixed_tier}")
                         for i in range(len(conversation))]
        else:
            self.episodic.sync(conversation.turns)
            latents = {e.turn: Latent(e.latents.to(self.model.device, self.model.dtype), e.turn)
                       for e in self.episodic.entries}
            if self.fixed_tier == "latent":
                decisions = [TurnDecision(i, "latent", None, "variant: every reply as latents") for i in range(len(conversation))]
            else:
                decisions = self._hcr_decisions(query)
                records.append(_score_summary(decisions, self.tau_low, self.tau_high))
        latents = {i: lat for i, lat in latents.items() if decisions[i].tier == "latent"}
        return assemble_plan(
            self.name, conversation, query, decisions,
            system_source=self.im if self.use_im else None, latents=latents, records=records, tokenizer=self.tokenizer,
        )

    def _hcr_decisions(self, query: str) -> list[TurnDecision]:
        from rhea_kernels import score_tiers

        scores = self.episodic.score(query)
        if scores.numel() == 0:
            return []
        tiers = score_tiers(scores[None], self.tau_low, self.tau_high)[0].tolist()
        return [TurnDecision(i, TIERS[t], float(s), f"score {s:.3f} vs tau_low={self.tau_low}, tau_high={self.tau_high}")
                for i, (s, t) in enumerate(zip(scores.tolist(), tiers))]

    def counters(self) -> dict[str, float]:
        return {"compress_calls": self.episodic.compress_calls, "compress_s": self.episodic.compress_seconds}

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        self.im = InstructionalMemory()
        self.episodic = EpisodicMemory(self.model.compress, center=self.episodic.center, centering=self.episodic.centering)
        self._seen_queries.clear()

    def _state(self) -> dict:
        return {"im": self.im.to_dict(), "episodic": self.episodic.state_dict(),
                "seen_queries": [list(k) for k in sorted(self._seen_queries)]}

    def _load_state(self, state: dict) -> None:
        self.im = InstructionalMemory.from_dict(state["im"])
        self.episodic.load_state_dict(state["episodic"])
        self._seen_queries = {(int(i), q) for i, q in state.get("seen_queries", [])}


def _score_summary(decisions: list[TurnDecision], tau_low: float, tau_high: float) -> dict:
    """Distribution of this turn's scores and tiers, with a warning when one tier takes nearly all."""
    if not decisions:
        return {"scores": {"n": 0}}
    scores = torch.tensor([d.score for d in decisions])
    shares = {t: sum(d.tier == t for d in decisions) / len(decisions) for t in TIERS}
    out = {"scores": {"n": len(decisions), "min": float(scores.min()), "mean": float(scores.mean()), "max": float(scores.max()),
                      "tau_low": tau_low, "tau_high": tau_high, "tier_share": shares}}
    top = max(shares, key=shares.get)
    if len(decisions) >= 5 and shares[top] >= 0.9:
        fine_when = {"raw": "every past turn is relevant to the query", "latent": "every past turn is loosely related",
                     "drop": "the query is unrelated to every past turn"}[top]
        out["scores"]["warning"] = (f"{shares[top]:.0%} of turns fall in tier {top!r}: right only if {fine_when}; "
                                    "otherwise the thresholds do not separate this model's scores (calibrate "
                                    "tau_low/tau_high, or centre the latents)")
    return out


@register_policy("rhea-no-im")
class RheaNoIM(RheaPolicy):
    """Rhea without Instructional Memory (the paper's Table 3 ablation)."""

    default_use_im = False


@register_policy("rhea-all-raw")
class RheaAllRaw(RheaPolicy):
    """Rhea keeping every past turn as raw text (Table 4)."""

    default_fixed_tier = "raw"


@register_policy("rhea-drop-all")
class RheaDropAll(RheaPolicy):
    """Rhea dropping every past turn: only the instruction block and the query (Table 4)."""

    default_fixed_tier = "drop"


@register_policy("reply-soft-compress")
class ReplySoftCompress(RheaPolicy):
    """Every past reply as latents; no instructional memory, no retrieval."""

    default_use_im = False
    default_fixed_tier = "latent"
