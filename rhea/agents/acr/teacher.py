"""`RuleTeacher`: an offline, rule-based teacher for TGSE when no larger model is at hand.

TGSE takes any `TextGenerator` as its teacher (an OpenAI-compatible endpoint, a larger
local model; the paper uses GPT-5.2). This one needs neither: it reads the paper's
controller prompts (`rhea.agents.acr.operators`) and answers them by rules, so the loop can
run end to end offline (CI, the CPU benchmark). Like the paper's router it sees only the
task description and the history, never the current query.

- as router: drift cues in the history → an operator (a repeated rejected reply →
  path_prune, a correction → fact_rectify, a constraint the user set → attention_anchor, a
  long history mostly without facts or constraints → noise_filter), else none;
- as refactorer, each operator as the paper defines it (§4.2, Figures 9-14), on the facts
  the user stated as "the X is Y" (the latest statement is the trusted one):
  state_abstract: a snapshot of the facts plus the most recent turn (Eq. 3);
  noise_filter: the turns that state a fact or a constraint, plus the most recent one;
  fact_rectify: the history unchanged except the conflicting "the X is Y" spans, edited
  in place to the latest value (Eq. 5-6); path_prune: repeated failed attempts removed
  (Eq. 7); cognitive_boosting: the history with a ``[Thought]:`` directive appended
  (Eq. 8); attention_anchor: the history with a ``[KEY INFO]:`` section appended.

>>> from rhea.agents.acr.router import router_messages
>>> from rhea.agents.acr.history import HistoryTurn
>>> turns = [HistoryTurn(0, "Remember: the city is Oslo.", "Noted, the city is Oslo."),
...          HistoryTurn(1, "Correction: the city is actually Lima, not Oslo.", "Ok.")]
>>> RuleTeacher().generate(router_messages(turns))[:60]
'{"analysis": "A fact was corrected later in the conversation'
>>> from rhea.agents.acr.refactorer import refactor_messages
>>> print(RuleTeacher().generate(refactor_messages("fact_rectify", turns)))
<summary>[turn 1] User: Remember: the city is Lima.
[turn 1] Assistant: Noted, the city is Lima.
[turn 2] User: Correction: the city is actually Lima, not Oslo.
[turn 2] Assistant: Ok.</summary>
"""
from __future__ import annotations

import json
import re

from rhea.agents.acr import deterministic as det
from rhea.agents.acr.deterministic import CONSTRAINT_CUES, FAILURE_CUES
from rhea.agents.acr.history import HistoryTurn, format_history
from rhea.agents.acr.operators import (ATTENTION_ANCHOR, COGNITIVE_BOOSTING, FACT_RECTIFY, NOISE_FILTER, NONE,
                                       OPERATOR_TITLES, PATH_PRUNE, STATE_ABSTRACT)

_TURN_LINE = re.compile(r"\[turn (\d+)\] (User|Assistant): (.*)$", re.MULTILINE)
_TITLE = re.compile(r"^Operator name: (.+)$", re.MULTILINE)
_ROUTER_TASK = re.compile(r"^Task description: (.*)$", re.MULTILINE)
_REFACTOR_TASK = re.compile(r"^Current task: (.*)$", re.MULTILINE)
_HISTORY = re.compile(r"^Input context[^:]*: (.*?)\nOutput format:", re.MULTILINE | re.DOTALL)
_FACT = re.compile(r"\b(the ([a-z]+(?: [a-z]+)?) is (?:actually |now )?)([\w-]+)", re.IGNORECASE)
_CORRECTION = re.compile(r"\b(?:correction|actually|changed|update|instead)\b", re.IGNORECASE)
_BY_TITLE = {title: op for op, title in OPERATOR_TITLES.items()}


def _turns(text: str) -> list[HistoryTurn]:
    users, replies = {}, {}
    for n, role, content in _TURN_LINE.findall(text):
        (users if role == "User" else replies)[int(n) - 1] = content
    return [HistoryTurn(i, users[i], replies.get(i, "")) for i in sorted(users)]


def user_facts(turns: list[HistoryTurn]) -> dict[str, str]:
    """Facts the user stated as "the X is Y", latest value last-wins, in first-mention order."""
    facts: dict[str, str] = {}
    for t in turns:
        for _, key, value in _FACT.findall(t.user):
            facts[key.lower()] = value
    return facts


def rectify(text: str, facts: dict[str, str]) -> str:
    """`text` with every "the X is Y" span whose Y contradicts the latest fact edited in place."""
    def fix(m: re.Match) -> str:
        latest = facts.get(m.group(2).lower())
        return m.group(1) + latest if latest is not None and latest.lower() != m.group(3).lower() else m.group(0)

    return _FACT.sub(fix, text)


class RuleTeacher:
    """A rule-based router and refactorer behind the `TextGenerator` interface (see module docstring)."""

    def __init__(self, *, noise_min_turns: int = 8):
        self.noise_min_turns = noise_min_turns
        self.calls = 0

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls += 1
        text = messages[-1]["content"]
        title = _TITLE.search(text)
        if title and title.group(1).strip() in _BY_TITLE:
            history = _HISTORY.search(text)
            task = _REFACTOR_TASK.search(text)
            return self._refactor(_BY_TITLE[title.group(1).strip()], _turns(history.group(1) if history else text),
                                  task.group(1) if task else "")
        return self._route(_turns(text))

    def _route(self, turns: list[HistoryTurn]) -> str:
        failures = [i for i in range(len(turns) - 1) if FAILURE_CUES.search(turns[i + 1].user)]
        replies = [turns[i].assistant.lower() for i in failures]
        informative = [t for t in turns if _FACT.search(t.user) or CONSTRAINT_CUES.search(t.user)]
        if any(replies.count(r) > 1 for r in replies):
            choice, why = PATH_PRUNE, "The assistant repeated the same rejected answer several times."
        elif any(_CORRECTION.search(t.user) for t in turns):
            choice, why = FACT_RECTIFY, "A fact was corrected later in the conversation; the old value is stale."
        elif any(CONSTRAINT_CUES.search(t.user) and not _FACT.search(t.user) for t in turns):
            choice, why = ATTENTION_ANCHOR, "The user set constraints earlier that the answer must keep."
        elif len(turns) >= self.noise_min_turns and len(informative) < len(turns) / 2:
            choice, why = NOISE_FILTER, "Most of the long history carries no fact or constraint the task needs."
        else:
            choice, why = NONE, "The history is consistent and on track."
        return json.dumps({"analysis": why, "drift_detected": choice != NONE, "selected_operator": choice})

    def _refactor(self, operator: str, turns: list[HistoryTurn], task: str) -> str:
        facts = user_facts(turns)
        fact_line = "; ".join(f"the {k} is {v}" for k, v in facts.items())
        if operator == STATE_ABSTRACT:
            state = f"State: {fact_line}." if facts else "State: no facts established yet."
            body = state + ("\n" + format_history(turns[-1:]) if turns else "")
        elif operator == NOISE_FILTER:
            kept = [t for k, t in enumerate(turns) if k == len(turns) - 1 or _FACT.search(t.user)
                    or CONSTRAINT_CUES.search(t.user)]
            body = format_history(kept)
        elif operator == FACT_RECTIFY:
            body = format_history([HistoryTurn(t.index, rectify(t.user, facts), rectify(t.assistant, facts)) for t in turns])
        elif operator == PATH_PRUNE:
            keep = set(det.path_prune(turns).keep)
            body = format_history([t for t in turns if t.index in keep])
        elif operator == COGNITIVE_BOOSTING:
            hint = (f"Answer from the latest values the user stated ({fact_line}) and do not repeat a rejected answer."
                    if facts else "Restate the user's goal and answer the next message directly.")
            body = f"{format_history(turns)}\n[Thought]: {hint}"
        elif operator == ATTENTION_ANCHOR:
            constraints = [t.user for t in turns if CONSTRAINT_CUES.search(t.user) and not FAILURE_CUES.search(t.user)]
            lines = [f"- Task: {task}" if task else None, f"- Facts: {fact_line}" if facts else None,
                     f"- Constraints: {' | '.join(constraints)}" if constraints else None]
            body = format_history(turns) + "\n[KEY INFO]:\n" + "\n".join(x for x in lines if x)
        else:
            body = format_history(turns)
        return f"<summary>{body}</summary>"
