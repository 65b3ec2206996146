"""Sculptor (arXiv 2508.04664): reversible context tools a model uses on its own history.

- `AcmStore`: the sculptable, undoable view over a conversation's messages;
- `SculptorToolbox`: the six tools (fragment, summarize, fold, restore, search, detail);
- `SculptorLoop`: the tool-calling loop around any `rhea.backends.llm.TextGenerator`;
- `trajectory_instances` / `write_jsonl`: Algorithm 1 training data from a loop's run;
- `SculptorPolicy`: the loop as the "sculptor" context policy (store kept across turns);
- `ChatTemplateToolGenerator` / `EndpointToolGenerator` / `tool_generator`: native tool
  calling through a chat template's `tools=` or an OpenAI-compatible endpoint.
"""
from __future__ import annotations

from rhea.agents.sculptor.errors import AcmError, ConversationMismatchError
from rhea.agents.sculptor.generators import ChatTemplateToolGenerator, EndpointToolGenerator, tool_generator
from rhea.agents.sculptor.loop import LoopResult, SculptorLoop, Step, TraceEntry
from rhea.agents.sculptor.policy import SculptorPolicy, loop_answer
from rhea.agents.sculptor.prompts import PAPER_UNIFIED_PROMPT
from rhea.agents.sculptor.schemas import TOOL_NAMES, tool_schemas
from rhea.agents.sculptor.store import AcmStore, Fragment, OpRecord, SearchRecord
from rhea.agents.sculptor.tools import SculptorToolbox, ToolOutcome
from rhea.agents.sculptor.trajectories import TrainingInstance, trajectory_instances, write_jsonl

__all__ = [
    "AcmError", "ConversationMismatchError", "AcmStore", "Fragment", "OpRecord", "SearchRecord",
    "SculptorToolbox", "ToolOutcome", "TOOL_NAMES", "tool_schemas",
    "SculptorLoop", "LoopResult", "Step", "TraceEntry", "PAPER_UNIFIED_PROMPT",
    "TrainingInstance", "trajectory_instances", "write_jsonl", "SculptorPolicy", "loop_answer",
    "ChatTemplateToolGenerator", "EndpointToolGenerator", "tool_generator",
]
