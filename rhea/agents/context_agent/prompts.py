"""The prompts Context-Agent sends: topic attribution (per leaf path, or batched), branch
decision, node summary.

The paper (Hu et al., 2026, arXiv 2604.05552, §3.3) describes these steps but our copy of it
prints no prompt; the authors' released code (github.com/Steve2457/Context-Agent) has them.
Ours are paraphrases of the released ones with the same decision rules (the per-path yes/no
topic check: same core object AND dependence on the history; the branch rules: fork when the
message returns to an earlier node and the current path no longer helps, switch when it
resumes another branch, continue when it follows the last turn), not copies of its text.
The branch reply names only the action: ids come from retrieval, as the reference overrides
them. The batched topic prompt is ours (one call instead of one per leaf path).
"""
from __future__ import annotations

TOPIC_SYSTEM = (
    "You sort a user's new message into the conversation topic it belongs to. Each numbered topic "
    "lists summaries of its turns. A message belongs to a topic when it is about the same core object "
    "or task and builds on that topic's earlier turns (pronouns like 'it', refinements such as "
    "'change the budget', or phrases like 'back to'). A different city, product or task is a different "
    "topic even when the words look alike. Reply with one JSON object and nothing else: "
    '{"topic": <number>, "reason": "<a few words>"}. Use "topic": 0 for a new topic.'
)

TOPIC_PATH_SYSTEM = (
    "You decide whether a user's new message stays on a conversation topic, given a summary of that "
    "topic's turns. Check two things. (1) Core object: is the message about the same thing or the same "
    "task as the summary? Another place, tool or product is another object, even when the words look "
    "alike (weather in Paris vs weather in Rome are different). (2) Dependence: does the message build on "
    "that history, through pronouns (it, this, them), follow-up questions, or phrases such as 'back to' "
    "or 'as mentioned'? Answer yes only when both hold, otherwise no. Reply with one word: yes or no."
)

BRANCH_SYSTEM = (
    "You steer the flow inside one conversation topic. Turns are nodes with ids like n3; a branch is "
    "a line of turns. Compare the user's new message with the current path and the retrieved turns "
    "most similar to it, and choose one action:\n"
    "- CREATE_BRANCH: the message goes back to the most similar earlier turn and diverges from the current "
    "path (for example rejecting a later change), and the rest of the current path does not help answer it; "
    "the new branch starts from that most similar turn.\n"
    "- SWITCH_BRANCH: the message resumes the other branch that the most similar turn belongs to (or says "
    "so explicitly), and that branch's turns clearly help answer it.\n"
    "- CONTINUE: the message follows on from the last turn of the current path, which helps answer it.\n"
    "Reply with one JSON object and nothing else, e.g. "
    '{"action": "CONTINUE", "reason": "..."} or {"action": "CREATE_BRANCH", "reason": "..."} '
    'or {"action": "SWITCH_BRANCH", "reason": "..."}.'
)

SUMMARY_SYSTEM = (
    "You write a one-sentence note about one exchange for another assistant's memory: in the third person, "
    "one declarative sentence joining what the user wanted and what the assistant did, keeping every name, "
    "number and decision stated. No preamble. Reply with the sentence only."
)


def topic_messages(candidates: list[tuple[int, str, list[str]]], query: str) -> list[dict]:
    """Messages asking which numbered topic (`(number, label, summaries)`) `query` belongs to.

    >>> topic_messages([(1, "current", ["User plans a Rome trip."])], "Budget?")[1]["content"].splitlines()[1]
    '1. (current) User plans a Rome trip.'
    """
    lines = ["Topics:"]
    for number, label, summaries in candidates:
        tag = f"({label}) " if label else ""
        lines.append(f"{number}. {tag}{' | '.join(summaries) or '(no summary yet)'}")
    lines += ["", f"New message: {query}"]
    return [{"role": "system", "content": TOPIC_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def topic_path_messages(summary: str, query: str) -> list[dict]:
    """Messages asking whether `query` continues the topic whose leaf path `summary` sums up (yes/no).

    >>> topic_path_messages("User plans a Rome trip.", "Which hotel?")[1]["content"]
    'Topic summary: User plans a Rome trip.\\nNew message: Which hotel?'
    """
    return [{"role": "system", "content": TOPIC_PATH_SYSTEM},
            {"role": "user", "content": f"Topic summary: {summary or '(no summary yet)'}\nNew message: {query}"}]


def branch_messages(path: list[tuple[str, str]], similar: list[tuple[str, str, str, float]],
                    branches: list[tuple[str, str]], query: str) -> list[dict]:
    """Messages asking for CONTINUE / CREATE_BRANCH / SWITCH_BRANCH.

    path: (node id, summary) along the current path; similar: (node id, branch id, summary,
    similarity) retrieved for the query; branches: (branch id, description) other than the active one.

    >>> m = branch_messages([("n1", "User wants Rome.")], [("n1", "b1", "User wants Rome.", 0.8)], [], "Back to Rome")
    >>> "n1 [b1] sim=0.80" in m[1]["content"]
    True
    """
    lines = ["Current path (oldest first):"]
    lines += [f"- {nid}: {summary}" for nid, summary in path] or ["- (empty)"]
    lines += ["", "Turns most similar to the new message:"]
    lines += [f"- {nid} [{bid}] sim={sim:.2f}: {summary}" for nid, bid, summary, sim in similar] or ["- (none)"]
    lines += ["", "Other branches of this topic:"]
    lines += [f"- {bid}: {desc}" for bid, desc in branches] or ["- (none)"]
    lines += ["", f"New message: {query}"]
    return [{"role": "system", "content": BRANCH_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def summary_messages(user: str, assistant: str) -> list[dict]:
    """Messages asking for a one-sentence summary of one exchange.

    >>> summary_messages("hi", "hello")[1]["content"]
    'User: hi\\nAssistant: hello'
    """
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": f"User: {user}\nAssistant: {assistant}"}]
