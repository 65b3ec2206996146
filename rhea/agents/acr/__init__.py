"""ACR: adaptive context refactoring (router, refactorer, six operators + NONE, TGSE training).

Importing this package registers the "acr" context policy.

- `OPERATORS`, `refactor_prompt`, `router_system_prompt`: the paper's operators and prompts
  (appendix C, word for word; the older operator spellings load with a DeprecationWarning);
- `noise_filter`, `path_prune`, `attention_anchor`: deterministic operator implementations;
- `Router` / `parse_router_output`: the strict JSON router contract (falls back to NONE);
- `Refactorer` / `parse_summary`: the ``<summary>`` contract and its documented fallback;
- `ACRController`: router and refactorer as two named LoRA adapters on one base model;
- `ACRPolicy`: the "acr" policy, on top of any per-turn policy (Vanilla by default, or Rhea);
- `drift_episodes`, `RuleTeacher`: drift QA tasks and an offline rule-based teacher for TGSE
  (`rhea.training.acr`, ``rhea train-acr``).
"""
from __future__ import annotations

from rhea.agents.acr.controller import ACRController
from rhea.agents.acr.deterministic import attention_anchor, noise_filter, path_prune
from rhea.agents.acr.errors import ACRConfigError, ACRError, RefactorerOutputError, RouterOutputError, TGSEStateError
from rhea.agents.acr.history import HistoryTurn, format_history
from rhea.agents.acr.operators import (ACTIVE_OPERATORS, DESCRIPTIONS, OPERATORS, canonical_operator, refactor_prompt,
                                       router_system_prompt)
from rhea.agents.acr.policy import ACRPolicy, apply_refactor, plan_history
from rhea.agents.acr.refactorer import RefactorResult, Refactorer, parse_summary, refactor_messages
from rhea.agents.acr.router import Router, RouterDecision, parse_router_output, router_messages

__all__ = [
    "ACRController", "ACRPolicy", "apply_refactor", "plan_history", "OPERATORS", "ACTIVE_OPERATORS", "DESCRIPTIONS",
    "canonical_operator", "refactor_prompt", "router_system_prompt",
    "noise_filter", "path_prune", "attention_anchor", "Router", "RouterDecision", "parse_router_output",
    "router_messages", "Refactorer", "RefactorResult", "parse_summary", "refactor_messages", "HistoryTurn",
    "format_history", "ACRError", "ACRConfigError", "RouterOutputError", "RefactorerOutputError", "TGSEStateError",
]
