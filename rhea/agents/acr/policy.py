"""`ACRPolicy`: route, refactor, then answer ("acr" in the policy registry).

Every `build` first asks a base policy for its plan (Vanilla by default; Rhea or any policy
whose plans keep one decision per turn), so ACR runs on top of it. The router sees the
turns that plan keeps (latent replies as a placeholder) and the task description, never
the current query (paper, appendix B.2); the refactorer executes the chosen operator with
the task description, that history and ``{previous_context}``, the last refactored
context this policy produced in the conversation (carried between turns, reset with the
policy, saved in its state). On none the history goes forward unchanged (paper, §4.1 and
appendix C). The result rewrites the plan:

- a refactored *context* (LLM operators) goes into the system block under
  `REFACTORED_HEADER`, and the raw-text turns it replaces become ``drop`` decisions;
- a *selection* (deterministic noise_filter, path_prune) drops the turns it leaves out;
- an *anchor* (deterministic attention_anchor: the ``[KEY INFO]`` section) goes at the very
  end of the context, just before the question.

The plan's ``decisions.records`` gain ``{"event": "acr_route", ...}`` (analysis, drift,
operator, fallback reason, raw reply) and ``{"event": "acr_refactor", ...}`` (source,
fallback reason, raw reply, the refactored context or kept turns, and the original
history for audit). Latent turns of the base plan stay as they are.
"""
from __future__ import annotations

from typing import Any

from rhea.agents.acr.controller import REFACTORER, ROUTER, ACRController
from rhea.agents.acr.errors import ACRConfigError
from rhea.agents.acr.history import LATENT_REPLY, HistoryTurn
from rhea.agents.acr.operators import NONE, canonical_operator
from rhea.agents.acr.refactorer import Refactorer, RefactorResult
from rhea.agents.acr.router import Router, RouterDecision
from rhea.context.conversation import Conversation, Turn
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.errors import InvalidTurnError, RheaConfigError
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.vanilla import Vanilla

REFACTORED_HEADER = "Refactored context of the conversation so far ({operator}):"
ROUTE_EVENT = "acr_route"
REFACTOR_EVENT = "acr_refactor"


def _is_generator(obj: Any) -> bool:
    return callable(getattr(obj, "generate", None))


def plan_history(plan: ContextPlan, conversation: Conversation) -> list[HistoryTurn]:
    """The turns `plan` keeps, as the controllers see them (latent replies as a placeholder)."""
    turns = []
    for d in plan.decisions.turns:
        if d.tier == "drop":
            continue
        turn = conversation[d.turn]
        turns.append(HistoryTurn(d.turn, turn.user, turn.assistant if d.tier == "raw" else LATENT_REPLY))
    return turns


@register_policy("acr")
class ACRPolicy(ContextPolicy):
    """Adaptive context refactoring on top of a base policy's plan.

    controller: an `ACRController` (router and refactorer adapters; ``prompt_only=True``
    uses its base model with adapters disabled) or any `TextGenerator` (prompt-only: the
    same model routes and refactors). `router=` / `refactorer=` override either role with
    another `TextGenerator` (e.g. a teacher). `deterministic` (off by default, as in the paper
    where the refactorer executes every operator): run noise_filter, path_prune and
    attention_anchor by rules instead. `temperature`: decoding temperature of both controllers
    (0: greedy; the paper decodes at 0.7).

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> policy = ACRPolicy(ScriptedGenerator([
    ...     '{"analysis": "room corrected", "drift_detected": true, "selected_operator": "fact_rectify"}',
    ...     "<summary>The meeting room is 7.</summary>"]))
    >>> conv = Conversation([Turn("The meeting is in room 3.", "Noted."), Turn("Correction: room 7.", "Okay.")])
    >>> plan = policy.build(conv, "Which room?")
    >>> [m["role"] for m in plan.messages], [d.tier for d in plan.decisions.turns]
    (['system', 'user'], ['drop', 'drop'])
    >>> plan.decisions.records[-1]["operator"], plan.decisions.records[-1]["source"]
    ('fact_rectify', 'refactorer')
    >>> policy.previous_context
    'The meeting room is 7.'
    """

    controller_arg = "controller"

    def __init__(self, controller: ACRController | Any = None, *, router: Any = None, refactorer: Any = None,
                 prompt_only: bool = False, base_policy: ContextPolicy | None = None, task: str = "",
                 deterministic: bool = False, tau: float = 0.2, scorer: str = "bm25", embedder: Any = None,
                 router_max_new_tokens: int = 96, refactor_max_new_tokens: int = 256, temperature: float = 0.0,
                 system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if isinstance(controller, ACRController):
            route_gen = controller.generator(None if prompt_only else ROUTER)
            refactor_gen = controller.generator(None if prompt_only else REFACTORER)
        elif controller is None or _is_generator(controller):
            route_gen = refactor_gen = controller
        else:
            raise TypeError(f"controller must be an ACRController or a TextGenerator, got {type(controller).__name__}")
        route_gen = router if router is not None else route_gen
        refactor_gen = refactorer if refactorer is not None else refactor_gen
        if route_gen is None:
            raise ACRConfigError("ACR needs a router: pass controller= (an ACRController or a TextGenerator) or router=")
        if base_policy is not None and not isinstance(base_policy, ContextPolicy):
            raise TypeError(f"base_policy must be a ContextPolicy, got {type(base_policy).__name__}")
        if base_policy is not None and system_prompt is not None:
            raise ACRConfigError("give system_prompt to the base policy, not to ACR, when base_policy is set")
        self.base = base_policy if base_policy is not None else Vanilla(system_prompt=system_prompt, tokenizer=tokenizer)
        self.task = task
        if not 0.0 <= float(temperature) <= 2.0:
            raise ACRConfigError(f"temperature={temperature} must be in [0, 2]")
        self.router = Router(route_gen, max_new_tokens=router_max_new_tokens, temperature=temperature)
        self.refactorer = Refactorer(refactor_gen, deterministic=deterministic, tau=tau, scorer=scorer,
                                     embedder=embedder, max_new_tokens=refactor_max_new_tokens, temperature=temperature)
        self.prompt_only = bool(prompt_only)
        self.reset()

    def config(self) -> dict:
        return {"task": self.task, "deterministic": self.refactorer.deterministic, "tau": self.refactorer.tau,
                "scorer": self.refactorer.scorer, "prompt_only": self.prompt_only,
                "router_max_new_tokens": self.router.max_new_tokens,
                "refactor_max_new_tokens": self.refactorer.max_new_tokens, "temperature": self.router.temperature}

    # ------------------------------------------------------------------ policy API
    def observe(self, turn: Turn) -> None:
        super().observe(turn)
        self.base.observe(turn)

    def reset(self) -> None:
        self.base.reset()
        self.operator_counts: dict[str, int] = {}
        self.fallbacks = 0
        #: the last refactored context (the paper's ``{previous_context}``); None before the first refactoring
        self.previous_context: str | None = None

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        base_plan = self.base.build(conversation, query)
        turns = plan_history(base_plan, conversation)
        fitted: list[dict] = []  # the inner prompts' cuts (inner_budget records)
        decision = self.router.route(turns, self.task, record=fitted)
        result = self.refactorer.refactor(decision.selected_operator, turns, query, self.task,
                                          previous_context=self.previous_context,
                                          instructions=base_plan.decisions.instructions, record=fitted)
        self.operator_counts[decision.selected_operator] = self.operator_counts.get(decision.selected_operator, 0) + 1
        self.fallbacks += int(decision.fallback_reason is not None and bool(turns)) + int(result.fallback_reason is not None)
        plan = self.rewrite(base_plan, conversation, query, decision, result, turns, self.previous_context)
        plan.decisions.records.extend(fitted)
        refactored = result.as_text(turns)
        if refactored is not None:
            self.previous_context = refactored
        return plan

    def rewrite(self, base_plan: ContextPlan, conversation: Conversation, query: str, decision: RouterDecision,
                result: RefactorResult, turns: list[HistoryTurn], previous_context: str | None = None) -> ContextPlan:
        """The base plan with `result` applied and both controllers' records added."""
        try:
            return apply_refactor(base_plan, conversation, query, decision, result, turns,
                                  name=self.name, tokenizer=self.tokenizer, previous_context=previous_context)
        except InvalidTurnError as e:
            raise ACRConfigError(f"ACR cannot run on top of policy {self.base.name!r}: its plans do not keep one "
                                 f"decision per turn ({e}); use vanilla, recent-k, bm25, summary or the rhea family") from e

    def _state(self) -> dict:
        return {"base": self.base.state_dict(), "operator_counts": dict(self.operator_counts), "fallbacks": self.fallbacks,
                "previous_context": self.previous_context}

    def _load_state(self, state: dict) -> None:
        if "base" not in state:
            raise RheaConfigError("acr state lacks 'base'; pass what state_dict() returned")
        self.base.load_state_dict(state["base"])
        self.operator_counts = {}
        for name, count in state.get("operator_counts", {}).items():  # older spellings load with a DeprecationWarning
            op = canonical_operator(name)
            self.operator_counts[op] = self.operator_counts.get(op, 0) + int(count)
        self.fallbacks = int(state.get("fallbacks", 0))
        self.previous_context = state.get("previous_context")


def _refactor_record(result: RefactorResult, turns: list[HistoryTurn], previous_context: str | None = None) -> dict:
    return {"event": REFACTOR_EVENT, "operator": result.operator, "source": result.source,
            "previous_context": previous_context,
            "fallback_reason": result.fallback_reason, "raw": result.raw, "context": result.context,
            "keep": result.keep, "notes": {str(k): v for k, v in result.notes.items()}, "anchor": result.anchor,
            "scores": {str(k): v for k, v in result.scores.items()},
            "original_history": [t.to_dict() for t in turns] if result.operator != NONE else []}


def apply_refactor(base_plan: ContextPlan, conversation: Conversation, query: str, decision: RouterDecision,
                   result: RefactorResult, turns: list[HistoryTurn], *, name: str = "acr", tokenizer: Any = None,
                   previous_context: str | None = None) -> ContextPlan:
    """`base_plan` rewritten by `result` (see the module docstring), with the route and refactor records."""
    decisions, extra = [], []
    for d in base_plan.decisions.turns:
        if d.tier == "raw" and result.context is not None:
            d = TurnDecision(d.turn, "drop", d.score, f"replaced by the ACR {result.operator} context")
        elif d.tier != "drop" and result.keep is not None and d.turn not in result.keep:
            d = TurnDecision(d.turn, "drop", d.score, f"removed by ACR {result.operator}")
        elif d.turn in result.notes:
            d = TurnDecision(d.turn, d.tier, d.score, f"{d.note}; ACR {result.operator}: {result.notes[d.turn]}".lstrip("; "))
        decisions.append(d)
    if result.context is not None:
        extra.append(f"{REFACTORED_HEADER.format(operator=result.operator)}\n{result.context}")
    records = [*base_plan.decisions.records, decision.to_record(), _refactor_record(result, turns, previous_context)]
    latents = {lat.source_turn: lat for lat in base_plan.latents()}
    asked = f"{result.anchor}\n\n{query}" if result.anchor else query
    plan = assemble_plan(name, conversation, asked, decisions, system_source=base_plan.system_text,
                         extra_system=extra, latents=latents, records=records, tokenizer=tokenizer)
    plan.decisions.instructions = list(base_plan.decisions.instructions)
    return plan
