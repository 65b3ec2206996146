"""The six context-refactoring operators and NONE, with the prompts their LLM versions use.

The ACR paper's appendix C prompts are not reproduced verbatim; these are paraphrases
that keep each operator's intent. Every operator has an LLM implementation (the
refactorer, prompted with `refactor_prompt(operator)`); three also have deterministic ones
(`rhea.agents.acr.deterministic`).

>>> OPERATORS[0], len(OPERATORS)
('NONE', 7)
>>> check_operator("noise_filter")
'noise_filter'
"""
from __future__ import annotations

from rhea.agents.acr.errors import ACRConfigError

NONE = "NONE"
STATE_ABSTRACTION = "state_abstraction"
NOISE_FILTER = "noise_filter"
FACT_RECTIFICATION = "fact_rectification"
PATH_PRUNE = "path_prune"
COGNITIVE_BOOST = "cognitive_boost"
ATTENTION_ANCHOR = "attention_anchor"

#: NONE first, then the six refactoring operators.
OPERATORS = (NONE, STATE_ABSTRACTION, NOISE_FILTER, FACT_RECTIFICATION, PATH_PRUNE, COGNITIVE_BOOST, ATTENTION_ANCHOR)

#: One line per operator: when the router should pick it (shown to the router).
DESCRIPTIONS = {
    NONE: "the history is clean and on track; change nothing.",
    STATE_ABSTRACTION: "the history is long; condense it into the current state of the task "
                       "(facts, decisions, open goals) and drop the step-by-step record.",
    NOISE_FILTER: "much of the history is unrelated to the current question; keep only the relevant parts.",
    FACT_RECTIFICATION: "facts were corrected or changed along the way; keep only their latest, correct "
                        "values and remove the outdated ones.",
    PATH_PRUNE: "the same failed attempt was repeated; remove the dead ends and keep what was learned from them.",
    COGNITIVE_BOOST: "the assistant is stuck or reasoning poorly; add a short plan or key hints that "
                     "make the next step easier.",
    ATTENTION_ANCHOR: "instructions or constraints given earlier are being forgotten; restate them next to the question.",
}

#: The operator-specific part of the refactorer's instruction.
OPERATOR_INSTRUCTIONS = {
    STATE_ABSTRACTION: "Rewrite the conversation as a compact description of the current state: every fact, "
                       "value, decision and open goal still in force, without the turn-by-turn narrative.",
    NOISE_FILTER: "Keep only the parts of the conversation needed to answer the current question; drop small "
                  "talk and unrelated exchanges. Quote kept facts exactly.",
    FACT_RECTIFICATION: "Some facts were later corrected or updated. List every fact with its latest value only; "
                        "never mention a value that was replaced.",
    PATH_PRUNE: "Remove repeated failed attempts and dead ends. Keep one line per failed approach saying it "
                "failed, and everything that is still useful.",
    COGNITIVE_BOOST: "Summarize the relevant facts, then add a short step-by-step plan or the key hint needed "
                     "to answer the current question correctly.",
    ATTENTION_ANCHOR: "List every instruction and constraint the user set that still applies, followed by the "
                      "facts needed for the current question.",
}

REFACTORER_SYSTEM = (
    "You refactor the conversation history of an assistant so that it can answer the user's next question "
    "correctly with a shorter, cleaner context. Operator: {operator}. {instruction} Write the refactored "
    "context between <summary> and </summary> and write nothing else."
)

ROUTER_SYSTEM = (
    "You watch a conversation between a user and an assistant and decide whether its history has drifted "
    "(outdated or corrected facts, repeated failures, irrelevant noise, forgotten instructions, a history too "
    "long to follow) and, if so, which one operator should refactor it before the assistant answers.\n"
    "Operators:\n{operators}\n"
    "Reply with one JSON object and nothing else, exactly with these keys:\n"
    '{{"analysis": "<one or two sentences>", "drift_detected": true or false, '
    '"selected_operator": "<one of: {names}>"}}\n'
    'If drift_detected is false, selected_operator must be "NONE".'
)


def check_operator(name: str) -> str:
    """`name` if it is one of `OPERATORS`, else ACRConfigError naming the choices."""
    if name not in OPERATORS:
        raise ACRConfigError(f"operator {name!r} is not one of {OPERATORS}")
    return name


def router_system_prompt() -> str:
    """The router's system prompt (operators and their descriptions, the JSON contract)."""
    lines = "\n".join(f"- {name}: {DESCRIPTIONS[name]}" for name in OPERATORS)
    return ROUTER_SYSTEM.format(operators=lines, names=", ".join(OPERATORS))


def refactor_prompt(operator: str) -> str:
    """The refactorer's system prompt for `operator` (not NONE, which never refactors).

    >>> "<summary>" in refactor_prompt("fact_rectification")
    True
    """
    check_operator(operator)
    if operator == NONE:
        raise ACRConfigError("NONE keeps the history as it is; there is no refactor prompt for it")
    return REFACTORER_SYSTEM.format(operator=operator, instruction=OPERATOR_INSTRUCTIONS[operator])
