"""`RuleTeacher`: an offline, rule-based teacher for TGSE when no larger model is at hand.

TGSE takes any `TextGenerator` as its teacher (an OpenAI-compatible endpoint, a larger
local model). This one needs neither: it reads the controller prompts ACR builds and
answers them by rules, so the loop can run end to end offline (CI, the CPU benchmark).

- as router: drift cues in the history → an operator (a correction → fact_rectification,
  a repeated rejected reply → path_prune, a constraint the user set → attention_anchor, a
  long history mostly unrelated to the question → noise_filter), else NONE;
- as refactorer: the facts the user stated as "the X is Y" (latest value wins), those the
  question asks about first, inside ``<summary>…</summary>``.

>>> from rhea.agents.acr.router import router_messages
>>> from rhea.agents.acr.history import HistoryTurn
>>> turns = [HistoryTurn(0, "Remember: the city is Oslo.", "Noted."), HistoryTurn(1, "Correction: the city is actually Lima, not Oslo.", "Ok.")]
>>> RuleTeacher().generate(router_messages(turns, "What is the city?"))[:60]
'{"analysis": "A fact was corrected later in the conversation'
>>> from rhea.agents.acr.refactorer import refactor_messages
>>> RuleTeacher().generate(refactor_messages("fact_rectification", turns, "What is the city?"))
'<summary>The city is Lima.</summary>'
"""
from __future__ import annotations

import json
import re

from rhea.agents.acr.deterministic import CONSTRAINT_CUES, FAILURE_CUES, relevance_scores
from rhea.agents.acr.history import HistoryTurn
from rhea.agents.acr.operators import ATTENTION_ANCHOR, FACT_RECTIFICATION, NOISE_FILTER, NONE, OPERATORS, PATH_PRUNE

_TURN_LINE = re.compile(r"^\[turn (\d+)\] (User|Assistant): (.*)$", re.MULTILINE)
_QUERY = re.compile(r"^The user now asks: (.*)$", re.MULTILINE)
_OPERATOR = re.compile(r"Operator: (\w+)\.")
_FACT = re.compile(r"\bthe ([a-z]+(?: [a-z]+)?) is (?:actually |now )?([\w-]+)", re.IGNORECASE)
_CORRECTION = re.compile(r"\b(?:correction|actually|changed|update|instead)\b", re.IGNORECASE)


def _parse(messages) -> tuple[list[HistoryTurn], str]:
    text = messages[-1]["content"]
    users, replies = {}, {}
    for n, role, content in _TURN_LINE.findall(text):
        (users if role == "User" else replies)[int(n) - 1] = content
    turns = [HistoryTurn(i, users[i], replies.get(i, "")) for i in sorted(users)]
    query = _QUERY.search(text)
    return turns, query.group(1) if query else ""


def user_facts(turns: list[HistoryTurn]) -> dict[str, str]:
    """Facts the user stated as "the X is Y", latest value last-wins, in first-mention order."""
    facts: dict[str, str] = {}
    for t in turns:
        for key, value in _FACT.findall(t.user):
            facts[key.lower()] = value
    return facts


class RuleTeacher:
    """A rule-based router and refactorer behind the `TextGenerator` interface (see module docstring)."""

    def __init__(self, *, noise_min_turns: int = 8):
        self.noise_min_turns = noise_min_turns
        self.calls = 0

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls += 1
        turns, query = _parse(messages)
        operator = _OPERATOR.search(messages[0]["content"])
        if operator and operator.group(1) in OPERATORS:
            return self._refactor(operator.group(1), turns, query)
        return self._route(turns, query)

    def _route(self, turns: list[HistoryTurn], query: str) -> str:
        failures = [i for i in range(len(turns) - 1) if FAILURE_CUES.search(turns[i + 1].user)]
        replies = [turns[i].assistant.lower() for i in failures]
        if any(replies.count(r) > 1 for r in replies):
            choice, why = PATH_PRUNE, "The assistant repeated the same rejected answer several times."
        elif any(_CORRECTION.search(t.user) for t in turns):
            choice, why = FACT_RECTIFICATION, "A fact was corrected later in the conversation; the old value is stale."
        elif any(CONSTRAINT_CUES.search(t.user) and not _FACT.search(t.user) for t in turns):
            choice, why = ATTENTION_ANCHOR, "The user set constraints earlier that the answer must keep."
        elif len(turns) >= self.noise_min_turns and query and \
                sum(s < 0.2 for s in relevance_scores(turns, query)) > len(turns) / 2:
            choice, why = NOISE_FILTER, "Most of the long history is unrelated to the question."
        else:
            choice, why = NONE, "The history is consistent and on track."
        return json.dumps({"analysis": why, "drift_detected": choice != NONE, "selected_operator": choice})

    def _refactor(self, operator: str, turns: list[HistoryTurn], query: str) -> str:
        facts = user_facts(turns)
        asked = [k for k in facts if k in query.lower()]
        ordered = asked + [k for k in facts if k not in asked]
        lines = [f"The {k} is {facts[k]}." for k in ordered]
        if operator == PATH_PRUNE:
            rejected = {t.assistant for i, t in enumerate(turns[:-1]) if FAILURE_CUES.search(turns[i + 1].user)}
            lines += [f"Rejected answer (do not repeat): {r}" for r in sorted(rejected)]
        if not lines:
            lines = [f"User: {t.user}" for t in turns[-3:]]
        return "<summary>" + " ".join(lines) + "</summary>"
