"""The prompts of ACE's four roles: deciding, query formulation, thinking, answering.

The paper ("To Retrieve or To Think? An Agentic Approach for Context Evolution",
arXiv 2601.08747) says each agent's decision is "prompted with the original question,
current context, and sub-queries"; its exact prompt text was not available to us, so the
decision prompt below is our faithful rendering of that description (question, retrieved
context, sub-questions asked so far, and the two actions defined), asking for one word.

>>> msgs = decision_messages(WorkingMemory("Where is the milk?"))
>>> msgs[-1]["content"].splitlines()[0]
'Question: Where is the milk?'
"""
from __future__ import annotations

from rhea.agents.ace.memory import WorkingMemory

DECISION_SYSTEM = (
    "You are one of several agents that decide the next step toward answering a question. "
    "Choose RETRIEVE if the context is missing a fact needed to answer, so new passages must be looked up. "
    "Choose THINK if the context already holds the needed facts but they must be connected: "
    "a sub-question will be asked and answered from the context. "
    "Reply with exactly one word: RETRIEVE or THINK."
)

QUERY_SYSTEM = (
    "You write search queries. Given a question and the facts found so far, write one short "
    "search query for the fact that is still missing. Reply with the query only."
)

SUBQUESTION_SYSTEM = (
    "Given a question and the facts found so far, ask one simple sub-question whose answer, "
    "found in the facts, brings us closer to the answer. Reply with the sub-question only."
)

SUBANSWER_SYSTEM = "Answer the sub-question using only the facts given. Reply in one short sentence."

ANSWER_SYSTEM = (
    "Answer the question using the facts given. Reply with the answer only: a word or a short phrase."
)


def _or_none(text: str, none: str) -> str:
    return text if text else none


def decision_messages(memory: WorkingMemory) -> list[dict]:
    """f_decide(M_i, Q): question, current context and the sub-queries asked so far."""
    subs = "\n".join(f"- {t.sub_question} -> {t.text}" for t in memory.thoughts)
    user = (
        f"Question: {memory.question}\n\n"
        f"Context:\n{_or_none(memory.render_facts(), '(empty)')}\n\n"
        f"Sub-questions so far:\n{_or_none(subs, '(none)')}\n\n"
        "Next step (RETRIEVE or THINK):"
    )
    return [{"role": "system", "content": DECISION_SYSTEM}, {"role": "user", "content": user}]


def query_messages(memory: WorkingMemory) -> list[dict]:
    user = f"Question: {memory.question}\n\nFacts found so far:\n{memory.render()}\n\nSearch query:"
    return [{"role": "system", "content": QUERY_SYSTEM}, {"role": "user", "content": user}]


def subquestion_messages(memory: WorkingMemory) -> list[dict]:
    user = f"Question: {memory.question}\n\nFacts:\n{memory.render()}\n\nSub-question:"
    return [{"role": "system", "content": SUBQUESTION_SYSTEM}, {"role": "user", "content": user}]


def subanswer_messages(memory: WorkingMemory, sub_question: str) -> list[dict]:
    user = f"Facts:\n{memory.render()}\n\nSub-question: {sub_question}\nAnswer:"
    return [{"role": "system", "content": SUBANSWER_SYSTEM}, {"role": "user", "content": user}]


def answer_messages(question: str, facts: str) -> list[dict]:
    """The final answer prompt, shared by ACE and the baselines so only the context differs."""
    user = f"Facts:\n{_or_none(facts, '(none)')}\n\nQuestion: {question}\nAnswer:"
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]
