"""The three prompts Context-Agent sends: topic attribution, branch decision, node summary.

Written for this project after the Context-Agent paper (Hu et al., 2026, arXiv 2604.05552)
and its released code, paraphrased; the decisions ask for one JSON object so they can be
parsed strictly. Topic attribution is one batched call over every candidate leaf path
(the original asks once per leaf).
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

BRANCH_SYSTEM = (
    "You steer the flow inside one conversation topic. Turns are nodes with ids like n3; a branch is "
    "a line of turns. Decide how the user's new message relates to the current path:\n"
    "- CONTINUE: it follows on from the last turn of the current path.\n"
    "- CREATE_BRANCH: it goes back to an earlier turn of the path and explores an alternative from there "
    "(for example rejecting a later change); give that turn as fork_node_id.\n"
    "- SWITCH_BRANCH: it resumes another existing branch listed below; give its id as target_branch_id.\n"
    "Reply with one JSON object and nothing else, e.g. "
    '{"action": "CONTINUE", "reason": "..."} or {"action": "CREATE_BRANCH", "fork_node_id": "n2", "reason": "..."} '
    'or {"action": "SWITCH_BRANCH", "target_branch_id": "b3", "reason": "..."}.'
)

SUMMARY_SYSTEM = (
    "You write a one-sentence note about one exchange for another assistant's memory. Third person, "
    "keep every name, number and decision the user stated, no preamble. Reply with the sentence only."
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
