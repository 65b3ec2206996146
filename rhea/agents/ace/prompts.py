"""The prompts of ACE's four roles: deciding, query formulation, thinking, answering.

The decision prompt f_d(M_i, Q) is the one the paper prints in §2.2 ("To Retrieve or To
Think? An Agentic Approach for Context Evolution", arXiv 2601.08747), word for word, with its
own placeholders {Q} (the question) and {M_i} (the working memory: the question, the passages
retrieved so far and the (sub-query, answer) thoughts). The paper prints no other prompt:
f_R, f_T (Eq. 5, 7) and f_A (Eq. 9) are described only, so the other four prompts below are
our renderings of those descriptions (docs/reports/fidelity.md, section ACE).

>>> msgs = decision_messages(WorkingMemory("Where is the milk?"))
>>> msgs[0]["content"].startswith("You are an expert question-answering system. Based on the original question Where is the milk?")
True
"""
from __future__ import annotations

from rhea.agents.ace.memory import WorkingMemory

#: §2.2, the prompt template for f_d, word for word; {Q} and {M_i} are the paper's placeholders.
DECISION_TEMPLATE = (
    "You are an expert question-answering system. Based on the original question {Q}, the current context, "
    "and the sub-queries {M_i}, decide whether to: (1) THINK: continue asking one sub-query which is needed to "
    "answer the question; (2) RETRIEVE: retrieve more external documents from the context to gain more information."
)

# f_R (Eq. 5): "uses the current memory M_i to formulate a search query".
QUERY_SYSTEM = (
    "You write search queries. Given a question and the working memory so far, write one short "
    "search query for the information still needed to answer the question. Reply with the query only."
)

# f_T (Eq. 7): "generates a sub-query Q_sub, representing a necessary detail required to answer the
# main query Q" ...
SUBQUESTION_SYSTEM = (
    "Break the question down. Given the question and the working memory so far, ask one sub-query "
    "which is needed to answer the question and is not answered yet. Reply with the sub-query only."
)

# ... "It then internally generates an answer, A_sub, to this sub-query": no retrieval, the model
# answers from the memory and its own knowledge.
SUBANSWER_SYSTEM = (
    "Answer the sub-query yourself, using the working memory and what you know. "
    "Reply in one short sentence."
)

# f_A (Eq. 9): the answer from M_N and Q. Shared by ACE and every baseline, so only the context differs.
ANSWER_SYSTEM = (
    "Answer the question using the facts given. Reply with the answer only: a word or a short phrase."
)


def _or_none(text: str, none: str) -> str:
    return text if text else none


def render_memory(memory: WorkingMemory) -> str:
    """M_i as text: M_0 = {Q} (Eq. 2), then the passages and thoughts the rounds added (Eq. 6, 8).

    >>> m = WorkingMemory("Where is Mary?"); m.add_thought("Who is Mary?", "A person.")
    >>> print(render_memory(m))
    Where is Mary?
    Sub-question: Who is Mary? Answer: A person.
    """
    return "\n".join([memory.question] + ([memory.render()] if len(memory) else []))


def decision_messages(memory: WorkingMemory) -> list[dict]:
    """f_d(M_i, Q): the paper's template with {Q} and {M_i} filled in, as one user message."""
    text = DECISION_TEMPLATE.format(Q=memory.question, M_i=render_memory(memory))
    return [{"role": "user", "content": text}]


def query_messages(memory: WorkingMemory) -> list[dict]:
    user = f"Question: {memory.question}\n\nWorking memory:\n{memory.render()}\n\nSearch query:"
    return [{"role": "system", "content": QUERY_SYSTEM}, {"role": "user", "content": user}]


def subquestion_messages(memory: WorkingMemory) -> list[dict]:
    user = f"Question: {memory.question}\n\nWorking memory:\n{memory.render()}\n\nSub-query:"
    return [{"role": "system", "content": SUBQUESTION_SYSTEM}, {"role": "user", "content": user}]


def subanswer_messages(memory: WorkingMemory, sub_question: str) -> list[dict]:
    user = (f"Question: {memory.question}\n\nWorking memory:\n{memory.render()}\n\n"
            f"Sub-query: {sub_question}\nAnswer:")
    return [{"role": "system", "content": SUBANSWER_SYSTEM}, {"role": "user", "content": user}]


def answer_messages(question: str, facts: str) -> list[dict]:
    """The final answer prompt, shared by ACE and the baselines so only the context differs."""
    user = f"Facts:\n{_or_none(facts, '(none)')}\n\nQuestion: {question}\nAnswer:"
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]
