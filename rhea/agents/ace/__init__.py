"""ACE (arXiv 2601.08747): retrieve-or-think context evolution with majority-voting agents.

- `ACE(llm, retriever, n_agents=5, rounds=3).answer(question) -> Answer(text, memory, trace)`;
- retrievers behind one interface: `BM25Passages`, `DensePassages` (any `Embedder`);
- round 1 is RETRIEVE without a vote (so N=1 is single-step RAG, paper §3.2);
- the paper's baselines on the same pieces: `answer_without_retrieval` (Vanilla),
  `IterativeRetrieval` (``rounds=1`` = single-step RAG, more rounds = retrieve every round);
  `answer_with_all_passages` (every passage in context) is an extra baseline of ours;
- `AcePolicy`, registered as the context policy ``"ace"`` (past turns are the corpus).

>>> from rhea.agents.ace import ACE, BM25Passages
>>> from rhea.backends.llm import ScriptedGenerator
>>> ace = ACE(ScriptedGenerator(["hallway"]), BM25Passages(["Mary went to the hallway."]), n_agents=1, rounds=1)
>>> ace.answer("Where is Mary?").text
'hallway'
"""
from __future__ import annotations

from rhea.agents.ace.errors import AceConfigError, CorpusError
from rhea.agents.ace.memory import MemoryEntry, WorkingMemory
from rhea.agents.ace.orchestrator import ACE, IterativeRetrieval, answer_with_all_passages, answer_without_retrieval
from rhea.agents.ace.policy import AcePolicy
from rhea.agents.ace.retrievers import BM25Passages, DensePassages, PassageRetriever, make_retriever
from rhea.agents.ace.tokens import ROLES, RoundTokens, think_token_share
from rhea.agents.ace.trace import Answer, RoundRecord, Trace
from rhea.agents.ace.votes import RETRIEVE, THINK, Tally, Vote, parse_vote, tally

__all__ = [
    "ACE", "IterativeRetrieval", "answer_without_retrieval", "answer_with_all_passages", "Answer", "Trace", "RoundRecord",
    "WorkingMemory", "MemoryEntry", "PassageRetriever", "BM25Passages", "DensePassages", "make_retriever",
    "Vote", "Tally", "parse_vote", "tally", "RETRIEVE", "THINK", "ROLES", "RoundTokens", "think_token_share",
    "AcePolicy", "AceConfigError", "CorpusError",
]
