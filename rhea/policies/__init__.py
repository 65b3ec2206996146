"""Context policies: each turns (conversation, query) into a `ContextPlan`.

Importing this package registers the text baselines: "vanilla", "recent-k", "bm25",
"summary".

>>> from rhea.policies import get_policy
>>> get_policy("bm25", k=3).name
'bm25'
"""
from rhea.policies.assemble import assemble_plan, count_tokens, resolve_system
from rhea.policies.base import ContextPolicy
from rhea.policies.bm25 import BM25
from rhea.policies.recent_k import RecentK
from rhea.policies.registry import (BENCH_POLICIES, DEFAULT_POLICY, UnknownPolicyError, available_policies, get_policy,
                                    policy_class, register_policy)
from rhea.policies.rhea_policy import ReplySoftCompress, RheaAllRaw, RheaDropAll, RheaNoIM, RheaPolicy
from rhea.policies.summary import RollingSummary
from rhea.policies.vanilla import Vanilla

__all__ = [
    "ContextPolicy", "Vanilla", "RecentK", "BM25", "RollingSummary",
    "RheaPolicy", "RheaNoIM", "RheaAllRaw", "RheaDropAll", "ReplySoftCompress",
    "DEFAULT_POLICY", "BENCH_POLICIES", "get_policy", "policy_class", "register_policy", "available_policies",
    "UnknownPolicyError", "assemble_plan", "count_tokens", "resolve_system",
]
