"""A keyword embedder and a scripted branching conversation for the Context-Agent tests."""
from __future__ import annotations

import re

import numpy as np

KEYWORDS = ["rome", "trip", "cheap", "hotel", "luxury", "bread", "banana", "oven"]


class KeywordEmbedder:
    """One axis per keyword, L2-normalised; texts without keywords map to a shared 'other' axis."""

    def encode(self, texts):
        out = np.zeros((len(texts), len(KEYWORDS) + 1), dtype=np.float32)
        for i, text in enumerate(texts):
            words = set(re.findall(r"\w+", text.lower()))
            for j, k in enumerate(KEYWORDS):
                out[i, j] = float(k in words)
            if not out[i].any():
                out[i, -1] = 1.0
            out[i] /= np.linalg.norm(out[i])
        return out


# user message, LLM replies the agent consumes for this turn (decisions, then the summary).
# Topic attribution asks each leaf path yes/no, the active tree first; the branch LLM is asked
# only when the reference's gate opens (turns 5 and 6).
SCRIPT = [
    ("Plan a Rome trip for May", ["User plans a Rome trip in May."]),
    ("Banana bread recipe with an oven at 180", ["no", "User asks for banana bread."]),
    ("Back to Rome: a cheap hotel", ["no", "yes", "User wants a cheap hotel in Rome."]),
    ("Cheap hotel near the station", ["yes", "User wants the cheap hotel near the station."]),
    ("Rome trip with luxury instead", ["yes",
                                       '{"action": "CREATE_BRANCH", "fork_node_id": "n3", "reason": "alternative"}',
                                       "User considers luxury for the Rome trip."]),
    ("Cheap hotel after all", ["Sure! Let us switch back.", "Yes.",
                               '{"action": "SWITCH_BRANCH", "target_branch_id": "b9"}', ""]),
]


def drive(agent, conversation, script=SCRIPT):
    """Run the script through build/observe; returns the plan of each turn."""
    from rhea.context import Turn

    plans = []
    for user, _ in script:
        plans.append(agent.build(conversation, user))
        conversation.append(Turn(user, "ok"))
        agent.observe(conversation[-1])
    return plans


def script_replies(script=SCRIPT):
    return [r for _, replies in script for r in replies]
