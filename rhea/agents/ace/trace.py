"""What an ACE run leaves behind: one `RoundRecord` per round and the final `Answer`."""
from __future__ import annotations

from dataclasses import dataclass, field

from rhea.agents.ace.memory import WorkingMemory
from rhea.agents.ace.tokens import RoundTokens, sum_tokens, think_token_share
from rhea.agents.ace.votes import Tally, Vote


@dataclass
class RoundRecord:
    """Round `round` (1-based): the votes, the action taken, and what it added to memory.

    `tally` is None when the action was not voted (the retrieve-every-round baseline).
    `memory_size` is the number of memory entries after the round.
    """

    round: int
    action: str
    votes: list[Vote] = field(default_factory=list)
    tally: Tally | None = None
    query: str | None = None
    retrieved: list[tuple[int, float]] = field(default_factory=list)
    sub_question: str | None = None
    thought: str | None = None
    memory_size: int = 0
    tokens: RoundTokens = field(default_factory=RoundTokens)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "round": self.round, "action": self.action, "votes": [v.to_dict() for v in self.votes],
            "tally": self.tally.to_dict() if self.tally else None, "query": self.query,
            "retrieved": [[i, round(s, 4)] for i, s in self.retrieved], "sub_question": self.sub_question,
            "thought": self.thought, "memory_size": self.memory_size, "tokens": self.tokens.to_dict(),
            "notes": list(self.notes),
        }


@dataclass
class Trace:
    """All rounds plus the answer step's tokens; `counter` says how tokens were counted."""

    rounds: list[RoundRecord] = field(default_factory=list)
    answer_tokens: RoundTokens = field(default_factory=RoundTokens)
    counter: str = "regex-approx"

    @property
    def tokens(self) -> RoundTokens:
        return sum_tokens([r.tokens for r in self.rounds] + [self.answer_tokens])

    @property
    def think_share(self) -> float:
        """The paper's "Think (%)" (Table 2): THINK rounds / rounds (0.0 with no round)."""
        return self.actions.count("THINK") / len(self.rounds) if self.rounds else 0.0

    @property
    def think_token_share(self) -> float:
        """Share of this run's tokens spent on THINK steps (ours; not the paper's Think %)."""
        return think_token_share([r.tokens for r in self.rounds] + [self.answer_tokens])

    @property
    def actions(self) -> list[str]:
        return [r.action for r in self.rounds]

    def prefix(self, n_rounds: int, answer_tokens: RoundTokens) -> "Trace":
        return Trace(self.rounds[:n_rounds], answer_tokens, self.counter)

    def to_dict(self) -> dict:
        return {"rounds": [r.to_dict() for r in self.rounds], "answer_tokens": self.answer_tokens.to_dict(),
                "tokens": self.tokens.to_dict(), "think_share": self.think_share,
                "think_token_share": self.think_token_share, "counter": self.counter}


@dataclass
class Answer:
    """ACE's reply to a question: the text, the evolved working memory, and the trace."""

    text: str
    memory: WorkingMemory
    trace: Trace

    def to_dict(self) -> dict:
        return {"text": self.text, "memory": self.memory.to_dict(), "trace": self.trace.to_dict()}
