"""The six context-refactoring operators and NONE, with the ACR paper's prompts word for word.

Names and prompts are those of the paper's appendix C (Figures 6-14, arXiv ACR, "Adaptive
Context Refactoring via Context Refactoring Operators for Multi-Turn Dialogue"): the router
system prompt (Fig. 6) and input template (Fig. 7), the refactorer's shared system prompt
(Fig. 8) and one operator prompt per operator (Figs. 9-14) with the paper's placeholders
``{task_description}``, ``{previous_context}`` and ``{history}``. Only the layout differs:
the PDF's numbered and bulleted items are put on their own lines, and the figures' inline
code marks (the paper notes "Markdown markers are removed") are not reproduced.

Older spellings of four names (``state_abstraction``, ``fact_rectification``,
``cognitive_boost``, upper-case ``NONE``: `LEGACY_NAMES`) load, with a DeprecationWarning,
wherever saved data or a config may hold them (`canonical_operator`).

>>> OPERATORS[0], len(OPERATORS)
('none', 7)
>>> check_operator("noise_filter")
'noise_filter'
"""
from __future__ import annotations

import warnings

from rhea.agents.acr.errors import ACRConfigError

NONE = "none"
STATE_ABSTRACT = "state_abstract"
NOISE_FILTER = "noise_filter"
FACT_RECTIFY = "fact_rectify"
PATH_PRUNE = "path_prune"
COGNITIVE_BOOSTING = "cognitive_boosting"
ATTENTION_ANCHOR = "attention_anchor"

#: none first, then the six refactoring operators, in the order of the paper's router prompt.
OPERATORS = (NONE, STATE_ABSTRACT, NOISE_FILTER, FACT_RECTIFY, PATH_PRUNE, COGNITIVE_BOOSTING, ATTENTION_ANCHOR)
#: the six active operators (everything but none).
ACTIVE_OPERATORS = OPERATORS[1:]

#: Older spellings found in saved data -> the paper's names (accepted with a DeprecationWarning).
LEGACY_NAMES = {"NONE": NONE, "state_abstraction": STATE_ABSTRACT, "fact_rectification": FACT_RECTIFY,
                "cognitive_boost": COGNITIVE_BOOSTING}

#: Placeholder value of an empty ``{previous_context}`` (appendix C: "set to None if empty").
EMPTY_PREVIOUS_CONTEXT = "None"

# ---------------------------------------------------------------- router (Figures 6 and 7)
ROUTER_SYSTEM = """You are a Context Monitor for multi-turn dialogue LLMs.

Your job is to analyze the accumulated history and detect context drift, i.e., cases where the history becomes noisy, misleading, inconsistent, or excessively long and may harm the LLM's next decision.

Important constraint: You will receive only the history context, not the current query. Decide whether refactoring would help with the next action.

Available operators:
1) state_abstract: compress verbose history into a high-level state snapshot. Use when the key state is buried in details.
2) noise_filter: remove irrelevant or redundant content. Use when the history contains off-topic or repeated text.
3) fact_rectify: correct contradictions or factual errors. Use when the history conflicts with the current state.
4) path_prune: remove repeated failures or loops. Use when the history shows circular attempts.
5) cognitive_boosting: inject a short guiding thought to refocus. Use when the LLM is confused about the goal or next step.
6) attention_anchor: move or copy critical constraints to the end for recall. Use when important requirements are being overlooked.
7) none: no refactoring needed. Use when the history is clean and focused.

Output format (strict): Return only a valid JSON object with the following fields: {"analysis": "<brief 1-2 sentence explanation>", "drift_detected": <true or false>, "selected_operator": "<operator_name>"}

Rules:
- If drift_detected is false, selected_operator must be "none".
- If drift_detected is true, selected_operator must be one of the six active operators.
- Be conservative: only flag drift when it is likely to impact reasoning.
- Output only the JSON object, nothing else."""

ROUTER_USER = """Task description: {task_description}

History context (analyze for drift): {history}

Instruction: Analyze the history and output your assessment as a JSON object."""

# ---------------------------------------------------------------- refactorer (Figures 8-14)
REFACTORER_SYSTEM = """You are a Context Refactoring Engine for multi-turn dialogue LLMs.

Your job is to transform the provided history to improve the LLM's next decision by applying a specified transformation operator.

Core principles:
1) Preserve critical information needed for task completion.
2) Maintain coherence: the refactored context must be logically consistent and self-contained.
3) Enable progress: the result should support better decisions going forward.
4) Be conservative: when uncertain, preserve rather than remove.

Output rules:
1) Output only the refactored context within <summary> </summary> tags.
2) The refactored context must be directly usable as the new history.
3) Do not include any explanation or meta-commentary.
4) Do not add information that was not present in the original context.
5) Aim for meaningful compression while keeping critical information."""

OPERATOR_PROMPTS = {
    STATE_ABSTRACT: """Role: You are a precise text processing engine specialized in state abstraction.
Operator name: State Abstraction
Objective: Compress the interaction history into a concise state snapshot.
Transformation logic:
1) Identify the net results of actions in history.
2) Remove intermediate steps that no longer matter.
3) Replace detailed sequences with a compact description of the current physical/logical state.
4) Keep the most recent observation and any critical discoveries.
Key principles:
- Focus on what has been achieved, not how it was achieved.
- Track inventory changes.
- Track environment state changes.
- Preserve discovered constraints and rules.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context (raw interaction history): {history}
Output format: Return only: <summary> ... state snapshot ... </summary>""",
    NOISE_FILTER: """Role: You are a precise text processing engine specialized in noise filtration.
Operator name: Noise Filtration
Objective: Remove irrelevant noise while preserving useful information.
Transformation logic:
1) Identify segments orthogonal to the task.
2) Delete such segments entirely.
3) Ensure the remaining text is coherent and temporally consistent.
Remove:
- Repeated identical observations.
- Verbose descriptions that add no information.
- Failed actions that provide no new constraints.
- Navigation steps that do not change state.
Keep:
- State-changing actions and outcomes.
- New discoveries.
- Constraint-bearing error messages.
- The most recent observation.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context (noisy history): {history}
Output format: Return only: <summary> ... filtered context ... </summary>""",
    FACT_RECTIFY: """Role: You are a precise text processing engine specialized in fact rectification.
Operator name: Fact Rectification
Objective: Identify and correct inconsistencies or contradictions in the interaction history while preserving correct content.
Trusted signals:
- The current task description defines the goal.
- The most recent observation reflects the true current state.
- Successful actions are factual evidence; failed actions reveal constraints.
Transformation logic:
1) Locate statements in the history that conflict with the current observed state.
2) Detect logical inconsistencies.
3) Edit only the minimal conflicting spans to match trusted signals.
4) Preserve all correct parts of the history unchanged.
5) Do not invent new facts that are not supported by the task or observations.
Common issues to fix:
- Incorrect inventory tracking.
- Wrong location assumptions.
- Misremembered action outcomes.
- Contradictory state descriptions.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context: {history}
Output format: Return only: <summary> ... rectified context ... </summary>""",
    PATH_PRUNE: """Role: You are a precise text processing engine specialized in path pruning.
Operator name: Path Pruning
Objective: Truncate the history to remove failed branches and repetitive loops, while preserving any useful discoveries.
Transformation logic:
1) Identify where the interaction begins to loop, stall, or repeatedly fail.
2) Recognize loop patterns such as:
- trying the same action multiple times with the same failure,
- repeatedly searching the same locations without new findings,
- back-and-forth navigation returning to an unchanged state.
3) Delete the looping or dead-end portion.
4) Preserve any new information discovered, even within the failed branch.
5) End the context at a clean decision point so the LLM can attempt a new plan.
Pruning criteria:
- Remove sequences of three or more similar failed actions.
- Remove back-and-forth navigation that returns to the same state.
- Remove repeated searches of empty containers or rooms.
- Keep: discoveries, constraints, and the latest valid state summary.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context (history with potential loops/failures): {history}
Output format: Return only: <summary> ... pruned context ending at a clean decision point ... </summary>""",
    COGNITIVE_BOOSTING: """Role: You are a precise text processing engine specialized in cognitive reinforcement.
Operator name: Cognitive Reinforcement
Objective: Insert a short guiding directive to refocus the LLM and improve the next decision, without changing factual content.
Transformation logic:
1) Identify where the LLM becomes confused, inefficient, or stuck in the history.
2) Determine an actionable next sub-goal based on the task and the current state.
3) Insert a directive formatted exactly as: [Thought]: ...
4) The directive must be specific and actionable (what to do next), but must not add unsupported facts.
Reinforcement strategies:
- If stuck: recommend unexplored locations or a different interaction strategy.
- If confused: restate the immediate sub-goal clearly.
- If inefficient: suggest a more direct plan.
- If close to completion: highlight the remaining required steps.
Placement rule: Insert the [Thought] directive near the end of the refactored context, right before the most recent situation description, so it is salient for the next action.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context: {history}
Output format: Return only: <summary> ... refactored context ...
[Thought]: ... (one or two sentences, actionable) </summary>""",
    ATTENTION_ANCHOR: """Role: You are a precise text processing engine specialized in attention anchoring.
Operator name: Attention Anchoring
Objective: Move or copy critical information to the end of the context so it remains in the active attention region for the next action.
Transformation logic:
1) Identify critical information mentioned earlier but essential for completing the task.
2) Typical critical information includes: task objective, constraints, inventory, discovered key locations/items, partial progress, and what has already been searched.
3) Append a final section named [KEY INFO] at the very end of the context.
4) Ensure the [KEY INFO] section is the last content before the model generates the next action.
5) Do not add new facts; only restate or re-organize information that exists in the input.
What to anchor:
- The main task objective.
- Current inventory.
- Locations already searched.
- Discovered constraints or rules.
- Partial progress and remaining steps.
Current task: {task_description}
Previous refactored context: {previous_context}
Input context (history with potentially forgotten information): {history}
Output format: Return only: <summary> ... refactored context ...
[KEY INFO]: - Task: ... - Current inventory: ... - Searched locations: ... - Constraints: ... - Next logical step: ... </summary>""",
}

#: The "Operator name:" line of each operator prompt (how a teacher reading the prompt tells them apart).
OPERATOR_TITLES = {STATE_ABSTRACT: "State Abstraction", NOISE_FILTER: "Noise Filtration",
                   FACT_RECTIFY: "Fact Rectification", PATH_PRUNE: "Path Pruning",
                   COGNITIVE_BOOSTING: "Cognitive Reinforcement", ATTENTION_ANCHOR: "Attention Anchoring"}

#: One line per operator (the router prompt's descriptions), for docs and traces.
DESCRIPTIONS = {
    NONE: "no refactoring needed. Use when the history is clean and focused.",
    STATE_ABSTRACT: "compress verbose history into a high-level state snapshot. Use when the key state is buried in details.",
    NOISE_FILTER: "remove irrelevant or redundant content. Use when the history contains off-topic or repeated text.",
    FACT_RECTIFY: "correct contradictions or factual errors. Use when the history conflicts with the current state.",
    PATH_PRUNE: "remove repeated failures or loops. Use when the history shows circular attempts.",
    COGNITIVE_BOOSTING: "inject a short guiding thought to refocus. Use when the LLM is confused about the goal or next step.",
    ATTENTION_ANCHOR: "move or copy critical constraints to the end for recall. Use when important requirements are being overlooked.",
}


def canonical_operator(name: str) -> str:
    """The paper's name for `name`: itself, or (with a DeprecationWarning) the paper's name for an
    older spelling in `LEGACY_NAMES`. Anything else: ACRConfigError naming the choices.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     canonical_operator("fact_rectification"), w[0].category.__name__
    ('fact_rectify', 'DeprecationWarning')
    """
    if name in OPERATORS:
        return name
    if isinstance(name, str) and name in LEGACY_NAMES:
        new = LEGACY_NAMES[name]
        warnings.warn(f"ACR operator name {name!r} is deprecated; the paper's name is {new!r} "
                      "(old names are read from saved data and configs only)", DeprecationWarning, stacklevel=3)
        return new
    raise ACRConfigError(f"operator {name!r} is not one of {OPERATORS}")


def check_operator(name: str) -> str:
    """The canonical name of `name` (see `canonical_operator`), else ACRConfigError naming the choices."""
    return canonical_operator(name)


def router_system_prompt() -> str:
    """The router's system prompt (Figure 6, word for word)."""
    return ROUTER_SYSTEM


def router_user_prompt(task_description: str, history: str) -> str:
    """The router's input (Figure 7) with its placeholders filled."""
    return ROUTER_USER.format(task_description=task_description, history=history)


def refactor_prompt(operator: str) -> str:
    """The operator prompt template of `operator` (not none, which never refactors), placeholders unfilled.

    >>> "{previous_context}" in refactor_prompt("fact_rectify")
    True
    """
    operator = check_operator(operator)
    if operator == NONE:
        raise ACRConfigError("none keeps the history as it is; there is no refactor prompt for it")
    return OPERATOR_PROMPTS[operator]


def refactor_user_prompt(operator: str, task_description: str, history: str, previous_context: str | None) -> str:
    """The operator prompt of `operator` with the paper's three placeholders filled."""
    previous = previous_context if previous_context and previous_context.strip() else EMPTY_PREVIOUS_CONTEXT
    return refactor_prompt(operator).format(task_description=task_description, history=history,
                                            previous_context=previous)
