"""`ContextPlan`: what a policy decided to show the model for one query, and why.

A plan is an ordered list of chat messages (`{"role", "content"}`, where content is a str
or a list of parts mixing str and `Latent`), plus the decisions behind it and a token
ledger, so every policy is observable the same way.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Union

from rhea.constants import TIERS
from rhea.context.latent import Latent
from rhea.errors import InvalidTurnError

Content = Union[str, list]  # list items: str | Latent
ROLES = ("system", "user", "assistant", "tool")


@dataclass
class TurnDecision:
    """How one past turn appears in the plan: `raw` text, a `latent`, or `drop`ped.

    >>> TurnDecision(turn=3, tier="drop", score=0.1, note="below tau_low").tier
    'drop'
    """

    turn: int
    tier: str
    score: float | None = None
    note: str = ""
    #: every component score behind `score` (e.g. {"latent": .., "bm25": .., "dense": ..}); empty when there is one
    components: dict[str, float] = field(default_factory=dict)
    #: also shown as raw text after a later turn (a turn a query needs that the plan kept from an earlier query
    #: hides: `RheaConfig.replan_hidden = "recall"`); `tier` is where it sits in order
    recalled: bool = False
    #: with `recalled`: the turn its copy follows, the newest turn when it was first recalled, so the copy keeps
    #: its place while the plan is kept and each prompt extends the last (None: after the newest turn)
    recalled_after: int | None = None

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise InvalidTurnError(f"tier={self.tier!r} must be one of {TIERS}")
        if isinstance(self.turn, bool) or not isinstance(self.turn, int) or self.turn < 0:
            raise InvalidTurnError(f"TurnDecision.turn={self.turn!r} must be a turn index >= 0")
        after = self.recalled_after
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise InvalidTurnError(f"TurnDecision.recalled_after={after!r} must be a turn index >= 0 or None")


@dataclass
class PlanDecisions:
    """Per-turn tiers, the instructional-memory contents used, and free-form records
    (operators, tool calls, branches) for policies that make other kinds of choices."""

    turns: list[TurnDecision] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)

    def tier_of(self, turn: int) -> str | None:
        """The tier recorded for `turn`, or None if the plan made no decision about it."""
        for d in self.turns:
            if d.turn == turn:
                return d.tier
        return None


@dataclass
class TokenLedger:
    """Token accounting of a plan. `counter` names how text tokens were counted
    ("tokenizer" or "regex-approx") so ledgers from different setups are not mixed up."""

    text_tokens: int = 0
    latent_slots: int = 0
    dropped_turns: int = 0
    full_history_tokens: int = 0
    counter: str = "regex-approx"

    @property
    def saved_tokens(self) -> int:
        """Full-history tokens minus what the plan spends (text tokens + latent slots)."""
        return self.full_history_tokens - self.text_tokens - self.latent_slots


def _check_message(message: Any) -> dict:
    if not isinstance(message, dict) or "role" not in message or "content" not in message:
        raise InvalidTurnError(f"message {message!r} must be a dict with 'role' and 'content'")
    if message["role"] not in ROLES:
        raise InvalidTurnError(f"message role={message['role']!r} must be one of {ROLES}")
    content = message["content"]
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, (str, Latent)):
                raise InvalidTurnError(
                    f"message content parts must be str or Latent, got {type(part).__name__}; "
                    "wrap vectors in Latent(vectors, source_turn)"
                )
    elif not isinstance(content, str):
        raise InvalidTurnError(f"message content must be a str or a list of str/Latent parts, got {type(content).__name__}")
    return message


@dataclass
class ContextPlan:
    """Messages to render plus the decisions and ledger behind them.

    The system/instruction block is the first message with role "system" (may be absent).

    >>> plan = ContextPlan([{"role": "system", "content": "Answer in French."},
    ...                     {"role": "user", "content": "Hi"}])
    >>> plan.system_text
    'Answer in French.'
    >>> plan.latents()
    []
    """

    messages: list[dict] = field(default_factory=list)
    decisions: PlanDecisions = field(default_factory=PlanDecisions)
    ledger: TokenLedger = field(default_factory=TokenLedger)
    policy: str = ""
    #: per message, the past turn it shows (None: the system block, the query, or a message of no one turn);
    #: empty when the policy did not record it. `rhea.context.budget.fit_plan` cuts and drops by it.
    sources: list = field(default_factory=list)

    def __post_init__(self) -> None:
        for m in self.messages:
            _check_message(m)
        if self.sources and len(self.sources) != len(self.messages):
            raise InvalidTurnError(f"ContextPlan.sources has {len(self.sources)} entries for {len(self.messages)} messages; "
                                   "give one per message (None for a message of no past turn) or none")

    @property
    def system_text(self) -> str | None:
        """Text of the first system message, or None when the plan has no system block."""
        for m in self.messages:
            if m["role"] == "system":
                return _text_of(m["content"])
        return None

    def latents(self) -> list[Latent]:
        """Every Latent in message order (the order their rows fill `<mem>` slots)."""
        return [p for m in self.messages if isinstance(m["content"], list) for p in m["content"] if isinstance(p, Latent)]

    def text_messages(self) -> list[dict]:
        """Messages with str content only, for a `TextGenerator`; raises if a Latent is present."""
        out = []
        for m in self.messages:
            if isinstance(m["content"], list) and any(isinstance(p, Latent) for p in m["content"]):
                raise InvalidTurnError(
                    f"plan from policy {self.policy!r} holds latents; render() it for a latent-aware model instead"
                )
            out.append({"role": m["role"], "content": _text_of(m["content"])})
        return out

    def to_dict(self) -> dict:
        """A JSON-friendly view for logs; latents appear as their shape and source turn."""

        def part(p):
            return {"latent_slots": p.n_slots, "hidden": p.hidden_size, "source_turn": p.source_turn} if isinstance(p, Latent) else p

        messages = [
            {"role": m["role"], "content": [part(p) for p in m["content"]] if isinstance(m["content"], list) else m["content"]}
            for m in self.messages
        ]
        return {"policy": self.policy, "messages": messages, "decisions": asdict(self.decisions), "ledger": asdict(self.ledger)}


def _text_of(content: Content) -> str:
    return content if isinstance(content, str) else "".join(p for p in content if isinstance(p, str))
