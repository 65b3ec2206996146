"""`ContextPolicy`: the one interface every context-management method implements."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

from rhea.context.conversation import Conversation, Turn
from rhea.context.plan import ContextPlan
from rhea.errors import RheaConfigError
from rhea.policies.assemble import SystemSource, check_system_source


class ContextPolicy(ABC):
    """Decides what the model sees for a query, given the conversation so far.

    system_prompt: a str, an object with `render() -> str` (e.g. `InstructionalMemory`,
    whose `entries` are then recorded in the plan) or a zero-argument callable; it becomes
    the system block, so Rhea's instructional memory layers onto any policy.
    tokenizer: optional; when given, ledgers count real tokens instead of approximating.

    Subclasses implement `build`; stateful ones also override `observe`, `reset`,
    `_state` and `_load_state`. A policy also says how a session should run it (the class
    attributes below, and `planned_answer` / `counters`), so that no session or benchmark
    code needs to know policies by name.
    """

    name: ClassVar[str] = ""
    #: "generate": every plan is answered with Rhea's generate adapter (the policy feeds it latents
    #: or relies on its training); "base": the plain model answers, unless the plan holds latents.
    adapter: ClassVar[str] = "base"
    #: The constructor argument that takes the session's `RheaForCausalLM` itself (None: no such argument).
    model_arg: ClassVar[str | None] = None
    #: The constructor argument that takes an LLM controller (a `TextGenerator`); a session passes
    #: its own model there (adapters off) unless the caller gives one.
    controller_arg: ClassVar[str | None] = None
    #: The HCR thresholds the constructor takes (``rhea bench --tau-low / --tau-high`` set them).
    thresholds: ClassVar[tuple[str, ...]] = ()
    #: The `rhea.context.TokenBudget` the session answers under (the model's window less the reply's
    #: max_new_tokens), set by the session before every `build`; None when no window is known. A policy
    #: may plan within it (Rhea admits turns best-first while they fit); whatever it builds, the session
    #: passes the plan through `rhea.context.fit_plan`, so no plan renders over the window.
    token_budget: Any = None

    def __init__(self, *, system_prompt: SystemSource = None, tokenizer: Any = None):
        self.system_prompt = check_system_source(system_prompt)
        self.tokenizer = tokenizer

    @abstractmethod
    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        """The plan to answer `query` after `conversation` (which excludes the query)."""

    def observe(self, turn: Turn) -> None:
        """Update incremental state with a completed turn. Stateless policies ignore it."""
        if not isinstance(turn, Turn):
            raise TypeError(f"observe() takes a Turn, got {type(turn).__name__}")

    @classmethod
    def observe_batch(cls, policies: Sequence["ContextPolicy"], turns: Sequence[Turn]) -> None:
        """`policies[i].observe(turns[i])` for each i, the policies all of this class: several
        sessions' turns finished together (`rhea.session.batch.send_batch`). A policy whose
        `observe` calls a model (the rolling summary's rewrite) overrides this so that those calls
        become one batch."""
        if len(policies) != len(turns):
            raise RheaConfigError(f"observe_batch: {len(policies)} policies but {len(turns)} turns; pass one turn per policy")
        for policy, turn in zip(policies, turns):
            policy.observe(turn)

    def catch_up(self, conversation: Conversation) -> None:
        """Bring this (fresh) policy up to `conversation`, turns it did not answer itself: a
        switch of policy mid-conversation, or a history sent as a message list. By default it
        observes each turn."""
        for turn in conversation:
            self.observe(turn)

    def reset(self) -> None:
        """Forget incremental state, for a new conversation."""

    def planned_answer(self, plan: ContextPlan) -> str | None:
        """The reply this policy already wrote while building `plan` (None: the session generates one)."""
        return None

    def counters(self) -> dict[str, float]:
        """Running totals of the policy's own work (e.g. ``compress_calls``, ``compress_s``); a
        session records how much of each a turn's planning and observing took."""
        return {}

    def held_bytes(self) -> dict[str, int]:
        """Memory the policy holds for this conversation outside the session's own history cache and
        stored latents, by kind (``kv_cache``: keys/values the policy built itself, e.g. a kvpress
        press's pruned cache of its last turn); `ChatSession.bytes_held` adds these in. Default: none."""
        return {}

    def config(self) -> dict:
        """Constructor settings worth saving with a session (JSON-friendly)."""
        return {}

    def state_dict(self) -> dict:
        """Everything needed to resume: `{"name", "config", "state"}`."""
        return {"name": self.name, "config": self.config(), "state": self._state()}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("name") != self.name:
            got = state.get("name") if isinstance(state, dict) else type(state).__name__
            raise RheaConfigError(f"state is for policy {got!r}, not {self.name!r}; load it into get_policy({got!r})")
        self._load_state(state.get("state", {}))

    def _state(self) -> dict:
        return {}

    def _load_state(self, state: dict) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config()})"
