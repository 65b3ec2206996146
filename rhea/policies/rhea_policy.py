"""Rhea: Instructional Memory + Episodic Memory + Heuristic Context Retrieval (and its ablations).

One class covers the paper's method and the variants it is compared with, so every variant
runs the same code path and differs only in its switches:

=====================  ==========  ==================  =====================
name                   IM prefix   tiers               paper
=====================  ==========  ==================  =====================
``rhea``               yes         scored (config)     Rhea
``rhea-no-im``         no          scored (config)     Table 3 (no IM)
``rhea-all-raw``       yes         all raw             Table 4 (keep all raw)
``rhea-drop-all``      yes         all dropped         Table 4 (drop all)
``reply-soft-compress``  no        all latent          baseline
=====================  ==========  ==================  =====================
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import torch

from rhea.backends.retrieval import BM25Retriever
from rhea.constants import TIERS
from rhea.context.budget import MIN_KEPT_TOKENS
from rhea.context.conversation import Conversation, Turn, turn_text
from rhea.context.latent import Latent
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.errors import RheaConfigError, require_text
from rhea.memory.episodic import EpisodicMemory
from rhea.memory.instructional import InstructionalMemory
from rhea.memory.recognizer import PROMPTED_RECOGNIZER, InstructionRecognizer, prompted_recognizer, recognize_at
from rhea.memory.scoring import (COMPONENTS, FUSIONS, TierRule, assign_tiers, components_of, default_embedder,
                                 describe_thresholds, floor_mask, fuse, hidden_best, latent_tier_active, rank_order)
from rhea.modeling.config import check_replan, check_thresholds
from rhea.policies.assemble import assemble_plan, count_tokens, with_reminder
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy

FIXED_TIERS = (None, *TIERS)
#: the default bound on the latents a policy stores when it compresses only the replies its plans show: 1 GiB, about
#: 640 replies of SmolLM2-135M in float32 (1.66 MB each under `states` injection) or 780 of Qwen2.5-Coder-1.5B in
#: bfloat16 (1.38 MB)
DEFAULT_LATENT_BYTES = 1 << 30
#: what `RheaPolicy(latent_dtype=...)` accepts: "model" (the model's dtype) or a dtype's name
LATENT_DTYPES = {"model": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@register_policy("rhea")
class RheaPolicy(ContextPolicy):
    """Rhea's hybrid context for a `RheaForCausalLM`.

    Each query first goes through the `InstructionRecognizer`; global instructions (and
    revocations) update the `InstructionalMemory`, rendered verbatim as the system block.
    Every past turn is then scored (``scorer``: the latents' max-cosine, BM25, MiniLM cosine, or
    a fusion of those; `rhea.memory.scoring`) and kept as text, as latents or dropped, under
    thresholds (``tier_mode="threshold"``, the paper's HCR) or a budget (at most ``max_raw`` raw
    and ``max_latent`` latent turns). A reply is compressed at most once (episodic memory): as it
    arrives when a latent score needs every reply, else only when a plan first places it in the
    latent tier (`compresses_every_reply`), so catching up on a long history compresses nothing and
    a question compresses at most ``max_latent`` replies; the plan's ``compression`` record says how
    many replies hold latents and why the others do not. The latent tier is on only when the model's
    recorded compressor fidelity meets the target, or ``latent_tier="on"``. A dropped turn's note
    says why (below every floor, or ranked after the turns the budget keeps). Defaults come from
    ``model.config`` (`RheaConfig`); each keyword overrides one.

    ``latent_bytes``: the most bytes of latents kept when replies are compressed only as plans show them (the
    default, with a text scorer); past it the latents shown least recently are let go and compressed again if a
    later plan shows them, so a conversation of thousands of turns holds a bounded memory. None: no bound.

    ``latent_dtype``: the dtype stored latents are kept in: "model" (default: the model's own dtype, the one
    they are injected in, so bfloat16 on a bfloat16 model, half the bytes of float32 and nothing lost), or
    "float32", "bfloat16", "float16" (bfloat16 on a float32 model halves what Rhea holds, rounding what the
    generate pass reads). Scores are computed in float32 whatever is stored.

    ``instruction_reminder``: also restate the standing instructions after the current message
    (`InstructionalMemory.reminder`), nearest the reply, besides the system block (off by default; its tokens
    are counted in the budget and the ledger).

    ``recognizer``: "default" (rules, then the MiniLM head), "minilm", "ngram", None (rules
    only), "prompt" (rules, then the paper's YES/NO prompt on this policy's own model, adapters
    off: worth it on a capable model, ~2 s a message that no rule decides on a 1.5B model on one
    CPU thread), or an `InstructionRecognizer` / callable.

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
        scorer: str | None = None,
        fusion: str | None = None,
        fusion_components: list[str] | None = None,
        fusion_weights: list[float] | None = None,
        rrf_k: float | None = None,
        dense_floor: float | None = None,
        dense_high: float | None = None,
        tier_mode: str | None = None,
        max_raw: int | None = None,
        max_latent: int | None = None,
        recent_raw: int | None = None,
        latent_tier: str | None = None,
        replan_every: int | None = None,
        replan_top: int | None = None,
        replan_hidden: str | None = None,
        replan_recall_max: int | None = None,
        embedder: Any = None,
        latent_bytes: int | None = DEFAULT_LATENT_BYTES,
        latent_dtype: str = "model",
        instruction_reminder: bool = False,
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
        pick = lambda v, name: getattr(cfg, name) if v is None else v  # noqa: E731
        self.scorer = pick(scorer, "scorer")
        self.fusion = pick(fusion, "fusion")
        self.fusion_components = list(pick(fusion_components, "fusion_components"))
        weights = pick(fusion_weights, "fusion_weights")
        if self.fusion not in FUSIONS:
            raise RheaConfigError(f"fusion={self.fusion!r} must be one of {FUSIONS}")
        bad = [c for c in self.fusion_components if c not in COMPONENTS]
        if bad or not self.fusion_components:
            raise RheaConfigError(f"fusion_components={self.fusion_components!r} must name components from {COMPONENTS}")
        if weights is not None and len(weights) != len(self.fusion_components):
            raise RheaConfigError(f"fusion_weights={weights!r} needs one weight per component {self.fusion_components}")
        self.fusion_weights = None if weights is None else dict(zip(self.fusion_components, map(float, weights)))
        self.rrf_k = float(pick(rrf_k, "rrf_k"))
        self.components = components_of(self.scorer, self.fusion_components)
        self.latent_tier = pick(latent_tier, "latent_tier")
        self.latents_on, self.latent_tier_reason = latent_tier_active(self.latent_tier, getattr(cfg, "fidelity", None))
        self.rule = TierRule(mode=pick(tier_mode, "tier_mode"), tau_low=self.tau_low, tau_high=self.tau_high,
                             dense_floor=float(pick(dense_floor, "dense_floor")),
                             dense_high=float(pick(dense_high, "dense_high")),
                             max_raw=pick(max_raw, "max_raw"), max_latent=pick(max_latent, "max_latent"),
                             latents=self.latents_on, recent_raw=pick(recent_raw, "recent_raw"))
        self.replan_every = pick(replan_every, "replan_every")
        self.replan_top = pick(replan_top, "replan_top")
        self.replan_hidden = pick(replan_hidden, "replan_hidden")
        check_replan(self.replan_every, self.replan_top, self.replan_hidden)
        if replan_recall_max is not None and (isinstance(replan_recall_max, bool) or not isinstance(replan_recall_max, int)
                                              or replan_recall_max < 0):
            raise RheaConfigError(f"replan_recall_max={replan_recall_max!r} must be an int >= 0 (the most recalled copies a "
                                  "kept plan holds before a fresh plan) or None (no bound)")
        #: the most recalled copies (`replan_hidden="recall"`) a kept plan holds; a query whose best turns would take
        #: it past this gets a fresh plan instead, so the prompt stops growing by copies (None: no bound)
        self.replan_recall_max = replan_recall_max
        #: the last fresh plan: {"at": turns it covered, "decisions", "system": IM block, "digest": those turns' text,
        #: "queries": queries answered with it since}
        self._plan: dict | None = None
        self._embedder = embedder
        self._bm25: tuple[list[str], BM25Retriever] | None = None
        self.use_im = self.default_use_im if use_im is None else bool(use_im)
        self.fixed_tier = self.default_fixed_tier if fixed_tier == "default" else fixed_tier
        if self.fixed_tier not in FIXED_TIERS:
            raise RheaConfigError(f"fixed_tier={self.fixed_tier!r} must be one of {FIXED_TIERS}")
        #: the recognizer's name when it was given by name (rebuilt from it by `config`)
        self.recognizer_name = recognizer if isinstance(recognizer, str) or recognizer is None else None
        if recognizer == PROMPTED_RECOGNIZER:  # the paper's YES/NO prompt on this policy's own base model
            recognizer = prompted_recognizer(model, self.tokenizer) if self.use_im else None
        elif isinstance(recognizer, str) or recognizer is None:
            recognizer = InstructionRecognizer(recognizer) if self.use_im else None
        self.recognizer = recognizer
        self.im = InstructionalMemory()
        if not isinstance(instruction_reminder, bool):
            raise RheaConfigError(f"instruction_reminder={instruction_reminder!r} must be True (restate the standing "
                                  "instructions after the current message) or False")
        self.instruction_reminder = instruction_reminder
        if not isinstance(latent_dtype, str) or latent_dtype not in LATENT_DTYPES:
            raise RheaConfigError(f"latent_dtype={latent_dtype!r} must be one of {sorted(LATENT_DTYPES)} (\"model\": "
                                  "the model's own dtype)")
        self.latent_dtype = latent_dtype
        center = torch.tensor(cfg.latent_center) if cfg.latent_center is not None else None
        self.episodic = EpisodicMemory(model.compress_replies, center=center, centering=getattr(cfg, "latent_centering", "fixed"),
                                       score_view=model.score_view, store_dtype=self._store_dtype)
        self._seen_queries: set[tuple[int, str]] = set()
        self._token_counts: dict[str, int] = {}
        self._admit_compressed: set[int] = set()  # turns `_admit` compressed while planning (lazy latents)
        if latent_bytes is not None and (isinstance(latent_bytes, bool) or not isinstance(latent_bytes, int)
                                         or latent_bytes < 1):
            raise RheaConfigError(f"latent_bytes={latent_bytes!r} must be a whole number of bytes >= 1 (e.g. "
                                  f"{DEFAULT_LATENT_BYTES}, 1 GiB), or None for no bound")
        self.latent_bytes = latent_bytes
        self._bound_latents()

    def _store_dtype(self) -> torch.dtype:
        """The dtype the episodic memory stores latents in (`latent_dtype`; "model" follows the model's dtype)."""
        return LATENT_DTYPES[self.latent_dtype] or self.model.dtype

    def _bound_latents(self) -> None:
        """Bound the stored latents by `latent_bytes` when replies are compressed only as plans show them (a
        reply let go is compressed again if a later plan shows it); a memory that scores every turn keeps all."""
        self.episodic.max_bytes = None if self.compresses_every_reply else self.latent_bytes

    def config(self) -> dict:
        """Constructor arguments that rebuild this policy (a saved session reloads with them)."""
        r = self.rule
        return {"tau_low": self.tau_low, "tau_high": self.tau_high, "use_im": self.use_im, "fixed_tier": self.fixed_tier,
                "scorer": self.scorer, "fusion": self.fusion, "fusion_components": list(self.fusion_components),
                "fusion_weights": None if self.fusion_weights is None else list(self.fusion_weights.values()),
                "rrf_k": self.rrf_k, "dense_floor": r.dense_floor, "dense_high": r.dense_high, "tier_mode": r.mode,
                "max_raw": r.max_raw, "max_latent": r.max_latent, "recent_raw": r.recent_raw, "latent_tier": self.latent_tier,
                "replan_every": self.replan_every, "replan_top": self.replan_top, "replan_hidden": self.replan_hidden,
                **({"replan_recall_max": self.replan_recall_max} if self.replan_recall_max is not None else {}),
                **({"latent_bytes": self.latent_bytes} if self.latent_bytes != DEFAULT_LATENT_BYTES else {}),
                **({"latent_dtype": self.latent_dtype} if self.latent_dtype != "model" else {}),
                **({"instruction_reminder": True} if self.instruction_reminder else {}),
                **({"recognizer": self.recognizer_name} if self.recognizer_name not in (None, "default") else {})}

    def retrieval_mode(self) -> dict:
        """Scorer, tier rule and latent-tier state (recorded with every plan)."""
        return {"scorer": self.scorer, "fusion": self.fusion if self.scorer == "fused" else None,
                "components": list(self.components), "fusion_weights": self.fusion_weights, "rrf_k": self.rrf_k,
                "tier_mode": self.rule.mode, "max_raw": self.rule.max_raw, "max_latent": self.rule.max_latent,
                "recent_raw": self.rule.recent_raw, "dense_floor": self.rule.dense_floor, "dense_high": self.rule.dense_high,
                "replan_every": self.replan_every, "replan_top": self.replan_top, "replan_hidden": self.replan_hidden,
                "replan_recall_max": self.replan_recall_max,
                "latent_tier": self.latents_on, "latent_tier_reason": self.latent_tier_reason}

    @property
    def needs_latents(self) -> bool:
        """Whether replies must be compressed: a variant showing latents, a latent score, or an active latent tier."""
        if self.fixed_tier in ("raw", "drop"):
            return False
        return self.fixed_tier == "latent" or "latent" in self.components or self.latents_on

    @property
    def compresses_every_reply(self) -> bool:
        """Whether every reply is compressed as it arrives: a latent score or the every-reply-latent variant needs
        them all. Otherwise (text scorers with the latent tier on) a reply is compressed only once a plan places it
        in the latent tier, at most once (`EpisodicMemory.ensure`): a budget shows a handful of latent turns, so
        compressing a long history's every reply would be work no plan uses."""
        return self.needs_latents and (self.fixed_tier == "latent" or "latent" in self.components)

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    # ---------------------------------------------------------------- turn loop
    def observe(self, turn: Turn) -> None:
        super().observe(turn)
        if self.compresses_every_reply:
            self.episodic.append(turn)

    def catch_up(self, conversation: Conversation) -> None:
        """Observe each turn and re-read its user message with the recognizer, as `build` does
        live: instructions and revocations given before carry over, and one-off requests are in
        the memory's event log, as if this policy had answered every turn."""
        for i, turn in enumerate(conversation):
            self._update_instructions(i, turn.user)
            self.observe(turn)

    def _update_instructions(self, turn_index: int, query: str) -> list[dict]:
        if not self.use_im or (turn_index, query) in self._seen_queries:
            return []
        self._seen_queries.add((turn_index, query))
        decision = recognize_at(self.recognizer, query, turn_index)  # a first message's bare constraints are standing
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
        elif self.fixed_tier == "latent":
            self.episodic.sync(conversation.turns)
            decisions = [TurnDecision(i, "latent", None, "variant: every reply as latents") for i in range(len(conversation))]
        else:
            if self.compresses_every_reply:
                self.episodic.sync(conversation.turns)
            decisions, why = self._planned(conversation, query)
            if self.use_im:
                decisions = _retire(decisions, self.im.retired_turns())
            records.append({"retrieval": self.retrieval_mode()})
            if self.replan_every > 1:
                records.append({"replan": {"every": self.replan_every, "top": self.replan_top, "hidden": self.replan_hidden,
                                           "recall_max": self.replan_recall_max,
                                           "planned_at": self._plan["at"], "fresh": why is not None, "why": why,
                                           "recalled": [d.turn for d in decisions if d.recalled]}})
            records.append(_score_summary(decisions, self.tau_low, self.tau_high, self.rule.mode))
        lazy = self.needs_latents and not self.compresses_every_reply
        calls = self.episodic.compress_calls
        compressed = self._ensure_latents(conversation, decisions) if lazy else []
        if self.token_budget is not None and self.fixed_tier is None:
            decisions = self._admit(conversation, query, decisions)  # may compress a raw turn it shows as latents
        if lazy:
            compressed += self._ensure_latents(conversation, decisions)
            compressed = sorted(set(compressed) | self._admit_compressed)
            self._admit_compressed = set()
            shown = sum(d.tier == "latent" for d in decisions)
            records.append({"compression": {
                "compressed_now": compressed, "stored": len(self.episodic), "latent_turns": shown,
                "why": "replies are compressed only when a plan shows them as latents (text scorers rank the turns), "
                       f"once each: {len(self.episodic)} of {len(conversation)} past replies hold latents, "
                       "the others were never placed in the latent tier"}})
        if any(d.tier == "latent" for d in decisions):
            latents = {d.turn: Latent(self.episodic.get(d.turn).latents.to(self.model.device, self.model.dtype), d.turn)
                       for d in decisions if d.tier == "latent"}
        return assemble_plan(
            self.name, conversation, query, decisions,
            system_source=self.im if self.use_im else None, latents=latents, records=records, tokenizer=self.tokenizer,
            reminder=self._reminder(),
        )

    def _reminder(self) -> str:
        """The standing instructions restated after the message (`instruction_reminder`), or ""."""
        return self.im.reminder() if self.use_im and self.instruction_reminder else ""

    def _ensure_latents(self, conversation: Conversation, decisions: list[TurnDecision]) -> list[int]:
        """Compress (one batch, once each) the replies `decisions` place in the latent tier; the turns compressed now."""
        return self.episodic.ensure(conversation.turns, [d.turn for d in decisions if d.tier == "latent"])

    def _tokens(self, text: str) -> int:
        """Tokens of `text` as message content, remembered by text (a long conversation is counted once)."""
        if not text:
            return 0
        if self.tokenizer is None:
            return count_tokens(text)
        n = self._token_counts.get(text)
        if n is None:
            if len(self._token_counts) >= 8192:
                self._token_counts.clear()
            n = self._token_counts[text] = count_tokens(text, self.tokenizer)
        return n

    def _admit(self, conversation: Conversation, query: str, decisions: list[TurnDecision]) -> list[TurnDecision]:
        """The kept turns admitted best-first while they fit `token_budget`, counted in tokens (text) and
        `<mem>` slots (latents), after the instruction block and the query are reserved: a raw turn that no
        longer fits becomes latent if the latent tier is on and its latent fits, else it is dropped, with
        ``reason=budget`` in its note. The last ``recent_raw`` turns come first, then unscored turns (newer
        than a kept plan), newest first, then the scored ones, highest score first. The best turn that does
        not fit whole, when at least `MIN_KEPT_TOKENS` of room is left, stays raw for `rhea.context.fit_plan`
        to cut."""
        budget, per = self.token_budget, self.token_budget.per_message
        system = self.im.render() if self.use_im else ""
        message = with_reminder(query, self._reminder())
        room = (budget.prompt_tokens - budget.template_overhead - self._tokens(message)
                - (self._tokens(system) + per if system else 0))
        rows = _LatentRows(self, conversation) if self.latents_on else {}
        recent = len(conversation) - self.rule.recent_raw  # the last recent_raw turns: raw whatever they score
        order = sorted((d for d in decisions if d.tier != "drop" or d.recalled),
                       key=lambda d: (d.turn < recent, d.score is not None, -(d.score or 0.0), -d.turn))
        out = {d.turn: d for d in decisions}
        limit = f"the {budget.prompt_tokens}-token prompt the window allows"
        for d in order:
            turn = conversation[d.turn]
            user, raw = self._tokens(turn.user) + per, self._tokens(turn.assistant) + per
            cost = user + raw if d.tier == "raw" else user + rows.get(d.turn, 0) + per if d.tier == "latent" else 0
            extra = user + raw if d.recalled else 0
            if cost + extra <= room:
                room -= cost + extra
            elif d.recalled and cost <= room:
                room -= cost
                out[d.turn] = dataclasses.replace(d, recalled=False, note=f"{d.note}; reason=budget: not recalled "
                                                  f"({extra} more tokens would exceed {limit})")
            elif d.tier == "raw" and d.turn in rows and user + rows[d.turn] + per <= room:
                room -= user + rows[d.turn] + per
                out[d.turn] = dataclasses.replace(d, tier="latent", recalled=False, note=f"{d.note}; reason=budget: "
                                                  f"latent, its {cost} tokens as text would exceed {limit}")
            elif d.tier == "raw" and room >= MIN_KEPT_TOKENS + 2 * per:
                # the best turn left that does not fit whole: kept for `fit_plan` to cut to the room left
                room = 0
                out[d.turn] = dataclasses.replace(d, recalled=False, note=f"{d.note}; reason=budget: its {cost} "
                                                  f"tokens exceed what is left of {limit}, so it is cut to fit")
            else:
                out[d.turn] = dataclasses.replace(d, tier="drop", recalled=False, note=f"{d.note}; reason=budget: "
                                                  f"dropped, its {cost + extra} tokens would exceed {limit}")
        return [out[d.turn] for d in decisions]

    def _planned(self, conversation: Conversation, query: str) -> tuple[list[TurnDecision], str | None]:
        """This query's decisions and why they are a fresh plan (None: they keep an earlier one).

        With ``replan_every`` k > 1 a fresh plan (`_decisions`) is kept for up to k - 1 more queries (counted as
        queries, so a history that does not grow still gets a fresh plan): its turns keep their tiers and turns
        added since are raw, so each prompt extends the last one and the prefix KV cache reuses it. A fresh plan
        is made after k queries (or k turns added without a query, e.g. caught up), when the instruction block
        changed (the prompt changes from its start anyway), or when the turns the plan covered are no longer the conversation's first turns.
        With ``replan_top`` m > 0 the query is still scored (milliseconds), and each of its m best turns that a
        fresh plan shows raw but the kept plan hides (`hidden_best`) is, under ``replan_hidden="recall"``, shown raw
        after the newest turn and stays there, as a copy at that place, until the next fresh plan (so the prompt
        still only grows at its end), or, under ``"replan"``, the reason for a fresh plan now. With
        ``replan_recall_max`` c, a query whose hidden best turns would bring the copies past c gets a fresh plan instead.
        """
        n, k, plan = len(conversation), self.replan_every, self._plan
        system = self.im.render() if self.use_im else ""
        if k == 1:
            return self._decisions(conversation, query), "every turn"
        why = ("first plan" if plan is None else "instructions changed" if plan["system"] != system
               else f"{k} queries since the plan" if plan.get("queries", 0) >= k - 1
               else f"{k} turns since the plan" if not 0 <= n - plan["at"] < k
               else "earlier turns changed" if plan["digest"] != _digest(conversation, plan["at"]) else None)
        fresh = self._decisions(conversation, query) if why is not None or self.replan_top else None
        if why is None:
            at = plan["at"]
            kept = plan["decisions"] + [TurnDecision(i, "raw", None, f"added after the plan at turn {at}: raw until "
                                                     "the next plan") for i in range(at, n)]
            hidden = [] if fresh is None else hidden_best(
                [d.tier for d in kept], [d.tier for d in fresh],
                torch.tensor([-float("inf") if d.score is None else d.score for d in fresh]), self.replan_top)
            if hidden and self.replan_hidden == "replan":
                why = f"one of the query's {self.replan_top} best turns is not raw under the plan of turn {at}"
            elif self.replan_recall_max is not None and len(
                    {t for t, _ in plan.get("recalled", ())} | set(hidden)) > self.replan_recall_max:
                why = (f"recalling the query's hidden best turns would take the plan of turn {at} past "
                       f"replan_recall_max={self.replan_recall_max} recalled copies")
            else:
                plan["queries"] = plan.get("queries", 0) + 1
                label = f"kept from the plan at turn {at} (re-planned every {k} turns)"
                if fresh is None:
                    return [dataclasses.replace(d, note=f"{label}: {d.note}") for d in kept], None
                copies = dict(plan.get("recalled", ()))  # turn -> the turn its copy follows, while the plan is kept
                for turn in hidden:
                    copies.setdefault(turn, n - 1)
                plan["recalled"] = sorted(copies.items())

                def recall(turn: int) -> str:
                    if turn not in copies:
                        return ""
                    if copies[turn] == n - 1:
                        return " and recalled raw after the newest turn (one of the query's best)"
                    return (f" and recalled raw after turn {copies[turn]}, where an earlier query's best placed it "
                            "(kept there until the next plan)")
                return [dataclasses.replace(f, tier=d.tier, recalled=d.turn in copies, recalled_after=copies.get(d.turn),
                                            note=f"{label} as {d.tier}{recall(d.turn)}; now: {f.note}")
                        for d, f in zip(kept, fresh)], None
        self._plan = {"at": n, "decisions": fresh, "system": system, "digest": _digest(conversation, n), "queries": 0}
        return fresh, why

    def _decisions(self, conversation: Conversation, query: str) -> list[TurnDecision]:
        """Score every past turn with the configured scorer and give it a tier (rhea.memory.scoring)."""
        n = len(conversation)
        if n == 0:
            return []
        if self.components == ("latent",) and self.rule.mode == "threshold" and self.latents_on:
            return self._hcr_decisions(query)  # the paper's HCR: scores and tiers in one kernel
        comps = self._component_scores(conversation, query)
        score = comps[self.scorer] if self.scorer != "fused" else fuse(
            comps, self.fusion, weights=self.fusion_weights, rrf_k=self.rrf_k)
        tiers = assign_tiers(score, comps, self.rule)
        rank = {t: r for r, t in enumerate(rank_order(score).tolist(), 1)}
        eligible = floor_mask(comps, self.rule).tolist()
        floors = ", ".join({"latent": f"latent < tau_low={self.tau_low}", "bm25": "bm25 0: no word shared",
                            "dense": f"dense < {self.rule.dense_floor}"}[c] for c in comps)
        kept = f"{self.rule.max_raw} raw" + (f", {self.rule.max_latent} latent" if self.latents_on else "")
        out = []
        for i, tier in enumerate(tiers):
            why = "" if tier != "drop" else (
                f"; dropped: below every floor ({floors})" if not eligible[i]
                else f"; dropped: ranked after the turns the budget keeps ({kept})")
            parts = {c: round(float(comps[c][i]), 6) for c in comps}
            what = ", ".join(f"{c} {v:.3f}" for c, v in parts.items())
            fused = f"{self.fusion} {float(score[i]):.4f} from " if self.scorer == "fused" else ""
            out.append(TurnDecision(i, tier, float(score[i]),
                                    f"{fused}{what}; rank {rank[i]}/{n} ({self.rule.mode}"
                                    + (f", max_raw={self.rule.max_raw}, max_latent="
                                       f"{self.rule.max_latent if self.latents_on else 0}" if self.rule.mode == "budget"
                                       else ", " + describe_thresholds(comps, self.rule))
                                    + (f", last {self.rule.recent_raw} turns raw" if self.rule.recent_raw else "") + ")"
                                    + ("; recent" if i >= n - self.rule.recent_raw else "") + why,
                                    components=parts))
        return out

    def _component_scores(self, conversation: Conversation, query: str) -> dict[str, torch.Tensor]:
        texts = [turn_text(t) for t in conversation]
        comps: dict[str, torch.Tensor] = {}
        for c in self.components:
            if c == "latent":
                comps[c] = self.episodic.score(query)  # fp32: thresholds compare as the kernels do
            elif c == "bm25":
                if self._bm25 is None or self._bm25[0] != texts:
                    self._bm25 = (texts, BM25Retriever(texts))
                comps[c] = torch.tensor(self._bm25[1].scores(query), dtype=torch.float64)
            else:
                emb = torch.from_numpy(self.embedder.encode([query] + texts)).double()  # MiniLMEmbedder caches per text
                comps[c] = emb[1:] @ emb[0]
        return comps

    def _hcr_decisions(self, query: str) -> list[TurnDecision]:
        scores, tiers = self.episodic.score_and_tiers(query, self.tau_low, self.tau_high)
        if scores.numel() == 0:
            return []
        recent = scores.numel() - self.rule.recent_raw
        return [TurnDecision(i, "raw" if i >= recent else TIERS[t], float(s),
                             f"score {s:.3f} vs tau_low={self.tau_low}, tau_high={self.tau_high}"
                             + (f"; recent (last {self.rule.recent_raw} turns raw)" if i >= recent else ""),
                             components={"latent": float(s)})
                for i, (s, t) in enumerate(zip(scores.tolist(), tiers.tolist()))]

    def counters(self) -> dict[str, float]:
        return {"compress_calls": self.episodic.compress_calls, "compress_s": self.episodic.compress_seconds}

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        self.im = InstructionalMemory()
        self.episodic = EpisodicMemory(self.model.compress_replies, center=self.episodic.center, centering=self.episodic.centering,
                                       score_view=self.episodic.score_view, store_dtype=self._store_dtype)
        self._bound_latents()
        self._seen_queries.clear()
        self._bm25 = None
        self._plan = None

    def _state(self) -> dict:
        plan = None if self._plan is None else {**self._plan, "decisions": [dataclasses.asdict(d) for d in self._plan["decisions"]]}
        return {"im": self.im.to_dict(), "episodic": self.episodic.state_dict(),
                "seen_queries": [list(k) for k in sorted(self._seen_queries)], "plan": plan}

    def _load_state(self, state: dict) -> None:
        self.im = InstructionalMemory.from_dict(state["im"])
        self.episodic.load_state_dict(state["episodic"])
        self._seen_queries = {(int(i), q) for i, q in state.get("seen_queries", [])}
        plan = state.get("plan")  # absent in sessions saved before replan_every
        self._plan = None if plan is None else {**plan, "decisions": [TurnDecision(**d) for d in plan["decisions"]]}


class _LatentRows:
    """``{turn: latent rows}`` for `RheaPolicy._admit`: a turn's stored latents, compressed on first use when the
    policy compresses only the replies it shows as latents (the turns compressed so are noted on the policy)."""

    def __init__(self, policy: "RheaPolicy", conversation: Conversation):
        self.policy, self.conversation = policy, conversation

    def __contains__(self, turn: int) -> bool:
        return self.policy.episodic.get(turn) is not None or not self.policy.compresses_every_reply

    def get(self, turn: int, default: int = 0) -> int:
        return self[turn] if turn in self else default

    def __getitem__(self, turn: int) -> int:
        policy = self.policy
        if policy.episodic.get(turn) is None:
            done = policy.episodic.ensure(self.conversation.turns, [turn])
            policy._admit_compressed = policy._admit_compressed | set(done)
        return int(policy.episodic.get(turn).latents.shape[0])


def _digest(conversation: Conversation, n: int) -> str:
    """SHA-1 of the first `n` turns' text: a plan applies only to the turns it was made for."""
    h = hashlib.sha1()
    for turn in conversation.turns[:n]:
        h.update(turn_text(turn).encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


#: in a `TurnDecision.note`: the turn was dropped because it only gave instructions since taken back
RETIRED = "retired (instructions only, since taken back)"


def _retire(decisions: list[TurnDecision], retired: dict[int, str]) -> list[TurnDecision]:
    """Drop the turns that only gave instructions since taken back (`InstructionalMemory.retired_turns`):
    kept as text or latents they would bring the revoked rule back. Score and components stay recorded."""
    return [d if d.turn not in retired or (d.tier == "drop" and not d.recalled) else
            dataclasses.replace(d, tier="drop", recalled=False,
                                note=f"{d.note}; {RETIRED}: dropped, not {'recalled' if d.recalled else d.tier}; "
                                     f"{retired[d.turn]}")
            for d in decisions]


def is_retired(decision: TurnDecision) -> bool:
    """Whether `decision` drops its turn as retired (`RETIRED`) rather than by its score."""
    return RETIRED in decision.note


def _score_summary(decisions: list[TurnDecision], tau_low: float, tau_high: float, mode: str = "threshold") -> dict:
    """Distribution of this turn's scores and tiers, with a warning when one tier takes nearly all (threshold mode)."""
    if not decisions:
        return {"scores": {"n": 0}}
    scores = torch.tensor([d.score for d in decisions if d.score is not None], dtype=torch.float64)  # unscored: after a kept plan
    stat = (lambda f: float(f(scores))) if scores.numel() else (lambda f: None)  # noqa: E731
    shares = {t: sum(d.tier == t for d in decisions) / len(decisions) for t in TIERS}
    out = {"scores": {"n": len(decisions), "min": stat(torch.min), "mean": stat(torch.mean), "max": stat(torch.max),
                      "tau_low": tau_low, "tau_high": tau_high, "tier_share": shares}}
    top = max(shares, key=shares.get)
    if mode == "threshold" and len(decisions) >= 5 and shares[top] >= 0.9:
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
