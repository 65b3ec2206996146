"""Sculptor (arXiv 2508.04664): reversible context tools a model uses on its own history.

- `AcmStore`: the sculptable, undoable view over a conversation's messages;
- `SculptorToolbox`: the six tools (fragment, summarize, fold, restore, search, detail);
- `SculptorLoop`: the tool-calling loop around any `rhea.backends.llm.TextGenerator`;
- `trajectory_instances` / `write_jsonl`: Algorithm 1 training data from a loop's run;
- `sculptor_reward` / `run_reward`: Eq. 4's reward of a run (`reward`); the GSPO objective and
  Table 4's configuration live in `rhea.agents.sculptor.gspo` (torch; not run in rhea);
- `PAPER_UNIFIED_PROMPT` / `PI_LLM_PROMPT` / `NEEDLEBENCH_PROMPT`: appendix D's prompts;
- `SculptorPolicy`: the loop as the "sculptor" context policy (store kept across turns);
- `ChatTemplateToolGenerator` / `EndpointToolGenerator` / `tool_generator`: native tool
  calling through a chat template's `tools=` or an OpenAI-compatible endpoint.
"""
from __future__ import annotations

from rhea.agents.sculptor.errors import AcmError, ConversationMismatchError
from rhea.agents.sculptor.generators import (ChatTemplateToolGenerator, EndpointToolGenerator, TextToolGenerator,
                                             tool_generator)
from rhea.agents.sculptor.loop import LoopResult, SculptorLoop, Step, TraceEntry
from rhea.agents.sculptor.policy import SculptorPolicy, loop_answer
from rhea.agents.sculptor.prompts import NEEDLEBENCH_PROMPT, PAPER_PROMPTS, PAPER_UNIFIED_PROMPT, PI_LLM_PROMPT
from rhea.agents.sculptor.reward import RewardBreakdown, run_reward, sculptor_reward
from rhea.agents.sculptor.schemas import TOOL_NAMES, tool_schemas
from rhea.agents.sculptor.store import AcmStore, Fragment, OpRecord, SearchRecord
from rhea.agents.sculptor.tools import SculptorToolbox, ToolOutcome
from rhea.agents.sculptor.trajectories import TrainingInstance, trajectory_instances, write_jsonl

__all__ = [
    "AcmError", "ConversationMismatchError", "AcmStore", "Fragment", "OpRecord", "SearchRecord",
    "SculptorToolbox", "ToolOutcome", "TOOL_NAMES", "tool_schemas",
    "SculptorLoop", "LoopResult", "Step", "TraceEntry", "PAPER_UNIFIED_PROMPT", "PI_LLM_PROMPT",
    "NEEDLEBENCH_PROMPT", "PAPER_PROMPTS", "sculptor_reward", "run_reward", "RewardBreakdown",
    "TrainingInstance", "trajectory_instances", "write_jsonl", "SculptorPolicy", "loop_answer",
    "ChatTemplateToolGenerator", "EndpointToolGenerator", "TextToolGenerator", "tool_generator",
]
