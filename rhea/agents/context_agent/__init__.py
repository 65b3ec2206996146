"""Context-Agent (Hu et al., 2026): the dialogue as a forest of topic trees with branches.

Each turn is a node (text, embedding, parent, branch, summary). For a new message the agent
picks its topic (same tree, another tree, a new tree) and its branch (continue, fork from
an earlier node, switch to another branch); the context is the active path verbatim plus
one summary line per other topic and inactive branch. Registered as policy "context-agent".

>>> from rhea.policies import get_policy
>>> from rhea.backends.embedding import HashingEmbedder
>>> get_policy("context-agent", embedder=HashingEmbedder(32)).name
'context-agent'
"""
from rhea.agents.context_agent.errors import DecisionParseError, ForestStateError
from rhea.agents.context_agent.forest import Branch, Forest, Node, TopicTree
from rhea.agents.context_agent.policy import ContextAgent
from rhea.agents.context_agent.transitions import Navigator, NavigatorConfig, Placement, apply_placement

__all__ = [
    "ContextAgent", "Forest", "TopicTree", "Branch", "Node", "Placement", "Navigator", "NavigatorConfig",
    "apply_placement", "DecisionParseError", "ForestStateError",
]
