"""ACE: k agents vote RETRIEVE or THINK each round; the working memory grows only with
what the vote chose; after N rounds the answer is generated from the memory.

Round 1 is RETRIEVE without a vote (paper §3.2, Table 2: "The THINK action is not available
when N = 1", and single-step ACE is identical to RAG). The baselines of Table 1 share every
piece but the decision: `answer_without_retrieval` (Vanilla: the LLM alone), single-step RAG
(`IterativeRetrieval` with ``rounds=1``) and the retrieve-every-round baseline
(`IterativeRetrieval`, the IterDRAG row). `answer_with_all_passages` (every passage in
context) is an extra long-context baseline of ours, not in the paper.
"""
from __future__ import annotations

import math
import random
import re
from typing import Any

from rhea.agents.ace import prompts
from rhea.agents.ace.constrained import label_logprobs, sample_votes
from rhea.agents.ace.errors import AceConfigError
from rhea.agents.ace.memory import WorkingMemory
from rhea.agents.ace.retrievers import PassageRetriever
from rhea.agents.ace.tokens import MeteredLLM, RoundTokens
from rhea.agents.ace.trace import Answer, RoundRecord, Trace
from rhea.agents.ace.votes import ACTIONS, RETRIEVE, THINK, parse_vote, tally
from rhea.errors import require_text
from rhea.policies.validation import positive_int

_LEAD = re.compile(r"^\s*(?:search query|query|sub-question|subquestion|answer)\s*:\s*", re.IGNORECASE)


def clean_line(text: str) -> str:
    """The first non-blank line, without a leading "Query:"-style label or quotes.

    >>> clean_line('Search query: "where is Mary"\\nextra')
    'where is Mary'
    """
    for line in text.splitlines():
        line = _LEAD.sub("", line).strip().strip('"\'`').strip()
        if line:
            return line
    return ""


def _temperature(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise AceConfigError(f"{name}={value!r} must be a finite number >= 0 (0 = greedy)")
    return float(value)


class ACE:
    """Agentic Context Evolution over a passage corpus.

    Each round `n_agents` votes are sampled at `vote_temperature` (> 0 so agents differ;
    0 makes every agent vote alike) and tallied by majority; ties go to `tie_break`
    (see `rhea.agents.ace.votes`). RETRIEVE adds up to `passages_per_retrieval` passages
    not yet in memory, found by a query formulated from the memory (the question itself
    while the memory is empty). THINK asks a sub-question and answers it from the memory.

    vote_mode: "generate" (each agent writes a reply, parsed by `parse_vote`; unparseable
    replies abstain) or "constrained" (for a local `HFGenerator`: votes sampled from the
    model's probabilities of the two labels, see `rhea.agents.ace.constrained`).
    query_mode: "llm" (the model writes the search query from the memory) or "memory"
    (the question plus the memory's text: deterministic query expansion for models whose
    written queries drift off the question).
    force_first_retrieve: round 1 is RETRIEVE without a vote (the paper's setting, True);
    False lets the agents vote in round 1 too (an ablation, not the paper).

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> from rhea.agents.ace.retrievers import BM25Passages
    >>> corpus = ["Mary got the milk there.", "John went to the office.", "Mary went to the garden."]
    >>> llm = ScriptedGenerator(["THINK", "THINK", "RETRIEVE", "Who had it?", "Mary.", "garden"])
    >>> ans = ACE(llm, BM25Passages(corpus), n_agents=3, rounds=2, passages_per_retrieval=2).answer("Where is the milk?")
    >>> ans.text, ans.trace.actions, ans.memory.passage_indices, ans.trace.think_share
    ('garden', ['RETRIEVE', 'THINK'], [0], 0.5)
    """

    def __init__(
        self,
        llm,
        retriever: PassageRetriever,
        n_agents: int = 5,
        rounds: int = 3,
        *,
        passages_per_retrieval: int = 3,
        vote_temperature: float = 0.7,
        tie_break: str = RETRIEVE,
        vote_max_new_tokens: int = 24,
        query_max_new_tokens: int = 24,
        think_max_new_tokens: int = 32,
        answer_max_new_tokens: int = 16,
        vote_mode: str = "generate",
        query_mode: str = "llm",
        force_first_retrieve: bool = True,
        seed: int | None = 0,
        tokenizer: Any = None,
    ):
        if not isinstance(retriever, PassageRetriever):
            raise AceConfigError(f"retriever={retriever!r} must have .texts and search(query, k, exclude) (see BM25Passages)")
        if tie_break not in ACTIONS:
            raise AceConfigError(f"tie_break={tie_break!r} must be one of {ACTIONS}")
        if vote_mode not in ("generate", "constrained"):
            raise AceConfigError(f"vote_mode={vote_mode!r} must be 'generate' or 'constrained'")
        if vote_mode == "constrained" and not all(hasattr(llm, a) for a in ("_backbone", "_context", "tokenizer")):
            raise AceConfigError(f"vote_mode='constrained' needs a local rhea.backends.llm.HFGenerator, got {type(llm).__name__}; "
                                 "use vote_mode='generate'")
        if query_mode not in ("llm", "memory"):
            raise AceConfigError(f"query_mode={query_mode!r} must be 'llm' or 'memory'")
        if not isinstance(force_first_retrieve, bool):
            raise AceConfigError(f"force_first_retrieve={force_first_retrieve!r} must be True (the paper) or False")
        self.vote_mode, self.query_mode, self._rng = vote_mode, query_mode, random.Random(seed)
        self.force_first_retrieve = force_first_retrieve
        self.llm = MeteredLLM(llm, tokenizer)
        self.retriever = retriever
        self.n_agents = positive_int(n_agents, "n_agents")
        self.rounds = positive_int(rounds, "rounds")
        self.passages_per_retrieval = positive_int(passages_per_retrieval, "passages_per_retrieval")
        self.vote_temperature = _temperature(vote_temperature, "vote_temperature")
        self.tie_break = tie_break
        self.max_new_tokens = {
            "voting": positive_int(vote_max_new_tokens, "vote_max_new_tokens"),
            "query": positive_int(query_max_new_tokens, "query_max_new_tokens"),
            "thinking": positive_int(think_max_new_tokens, "think_max_new_tokens"),
            "answering": positive_int(answer_max_new_tokens, "answer_max_new_tokens"),
        }

    def config(self) -> dict:
        return {"n_agents": self.n_agents, "rounds": self.rounds, "passages_per_retrieval": self.passages_per_retrieval,
                "vote_temperature": self.vote_temperature, "tie_break": self.tie_break,
                "vote_mode": self.vote_mode, "query_mode": self.query_mode,
                "force_first_retrieve": self.force_first_retrieve,
                "max_new_tokens": dict(self.max_new_tokens), "retriever": getattr(self.retriever, "kind", "custom")}

    def _ask(self, role: str, messages: list[dict], record: RoundRecord, temperature: float = 0.0) -> str:
        return self.llm(role, messages, record.tokens, max_new_tokens=self.max_new_tokens[role], temperature=temperature)

    # ------------------------------------------------------------------ the three steps
    def decide(self, memory: WorkingMemory, record: RoundRecord) -> str:
        """MajorVote over the agents' f_decide(M_i, Q); votes and tally go into `record`."""
        messages = prompts.decision_messages(memory)
        if self.vote_mode == "constrained":
            messages = self.llm.fit("voting", messages, 8)  # room for the labels' own tokens after the prompt
            logprobs, prompt_tokens, label_tokens = label_logprobs(self.llm.llm, messages)
            record.tokens.add("voting", prompt_tokens, label_tokens)
            record.votes = sample_votes(logprobs, self.n_agents, self.vote_temperature, self._rng)
        else:
            record.votes = [parse_vote(r) for r in self.llm.sample(
                "voting", messages, record.tokens, self.n_agents, max_new_tokens=self.max_new_tokens["voting"],
                temperature=self.vote_temperature)]
        record.tally = tally(record.votes, tie_break=self.tie_break)
        return record.tally.action

    def retrieve(self, memory: WorkingMemory, record: RoundRecord) -> None:
        """f_R(M_i, K): formulate a query from the memory, add the new passages it finds."""
        if len(memory) == 0:
            record.query = memory.question  # nothing to reformulate from: M_0 is the question
        elif self.query_mode == "memory":
            record.query = " ".join([memory.question] + [f"{e.sub_question} {e.text}".strip() for e in memory.entries])
        else:
            record.query = clean_line(self._ask("query", prompts.query_messages(memory), record))
            if not record.query:
                record.query = memory.question
                record.notes.append("empty query reply; searched with the question")
        record.retrieved = self.retriever.search(record.query, self.passages_per_retrieval, exclude=memory.passage_indices)
        if not record.retrieved:
            record.notes.append("no new passage matched the query")
        for index, _ in record.retrieved:
            memory.add_passage(index, self.retriever.texts[index])

    def think(self, memory: WorkingMemory, record: RoundRecord) -> None:
        """f_T(M_i, Q) -> (Q_sub, A_sub) (Eq. 7): ask one sub-query needed to answer Q, then answer
        it internally (the model, given the memory; no retrieval); the pair joins the memory (Eq. 8)."""
        sub = clean_line(self._ask("thinking", prompts.subquestion_messages(memory), record))
        if not sub:
            sub = memory.question
            record.notes.append("empty sub-question reply; thought about the question itself")
        answer = clean_line(self._ask("thinking", prompts.subanswer_messages(memory, sub), record))
        record.sub_question, record.thought = sub, answer
        if answer:
            memory.add_thought(sub, answer)
        else:
            record.notes.append("empty thought; memory unchanged")

    # ------------------------------------------------------------------ whole runs
    def choose(self, memory: WorkingMemory, record: RoundRecord) -> str:
        if record.round == 1 and self.force_first_retrieve:
            record.notes.append("round 1: RETRIEVE without a vote (paper: THINK is not available at N = 1)")
            return RETRIEVE
        return self.decide(memory, record)

    def evolve(self, question: str) -> tuple[WorkingMemory, Trace]:
        """Run the N rounds; return the evolved memory and the trace (no answer yet)."""
        memory = WorkingMemory(require_text(question, "question"))
        trace = Trace(counter=self.llm.meter.counter)
        for n in range(1, self.rounds + 1):
            record = RoundRecord(round=n, action="")
            record.action = self.choose(memory, record)
            (self.retrieve if record.action == RETRIEVE else self.think)(memory, record)
            record.memory_size = len(memory)
            trace.rounds.append(record)
        return memory, trace

    def generate_answer(self, memory: WorkingMemory, tokens: RoundTokens) -> str:
        facts = memory.render() if len(memory) else ""
        reply = self.llm("answering", prompts.answer_messages(memory.question, facts), tokens,
                         max_new_tokens=self.max_new_tokens["answering"])
        return clean_line(reply)

    def answer(self, question: str) -> Answer:
        """Evolve the memory for N rounds, then answer from it."""
        memory, trace = self.evolve(question)
        text = self.generate_answer(memory, trace.answer_tokens)
        return Answer(text, memory, trace)

    def answers_by_round(self, question: str) -> list[Answer]:
        """The answers ACE gives with N = 1..rounds, from one run.

        The memory after round n is a prefix of the final one and the answer step is
        greedy, so answer n is what ``rounds=n`` returns given the same vote samples.
        """
        memory, trace = self.evolve(question)
        out = []
        for n, record in enumerate(trace.rounds, start=1):
            at_n = memory.prefix(record.memory_size)
            tokens = RoundTokens()
            text = self.generate_answer(at_n, tokens)
            out.append(Answer(text, at_n, trace.prefix(n, tokens)))
        return out


class IterativeRetrieval(ACE):
    """Retrieve every round, no vote (IterDRAG-style); ``rounds=1`` is single-step RAG.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> from rhea.agents.ace.retrievers import BM25Passages
    >>> rag = IterativeRetrieval(ScriptedGenerator(["kitchen"]), BM25Passages(["Tom is in the kitchen."]), rounds=1)
    >>> rag.answer("Where is Tom?").text
    'kitchen'
    """

    def __init__(self, llm, retriever: PassageRetriever, rounds: int = 3, **kwargs):
        super().__init__(llm, retriever, n_agents=1, rounds=rounds, **kwargs)

    def choose(self, memory: WorkingMemory, record: RoundRecord) -> str:
        return RETRIEVE


def answer_without_retrieval(llm, question: str, *, answer_max_new_tokens: int = 16, tokenizer: Any = None) -> Answer:
    """The paper's Vanilla baseline (Table 1, "a Vanilla LLM without any retrieval"): the shared
    answer prompt with no facts, one call.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> llm = ScriptedGenerator(["Paris"])
    >>> answer_without_retrieval(llm, "Capital of France?").text, "(none)" in llm.calls[0][-1]["content"]
    ('Paris', True)
    """
    memory = WorkingMemory(question)
    metered = MeteredLLM(llm, tokenizer)
    trace = Trace(counter=metered.meter.counter)
    reply = metered("answering", prompts.answer_messages(question, ""), trace.answer_tokens,
                    max_new_tokens=positive_int(answer_max_new_tokens, "answer_max_new_tokens"))
    return Answer(clean_line(reply), memory, trace)


def answer_with_all_passages(llm, passages: list[str], question: str, *, answer_max_new_tokens: int = 16,
                             tokenizer: Any = None) -> Answer:
    """A long-context baseline of ours (not in the paper): every passage in context, one answer call.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> answer_with_all_passages(ScriptedGenerator(["office"]), ["John went to the office."], "Where is John?").text
    'office'
    """
    memory = WorkingMemory(question)
    for i, text in enumerate(passages):
        memory.add_passage(i, text)
    metered = MeteredLLM(llm, tokenizer)
    trace = Trace(counter=metered.meter.counter)
    reply = metered("answering", prompts.answer_messages(question, memory.render_facts()), trace.answer_tokens,
                    max_new_tokens=positive_int(answer_max_new_tokens, "answer_max_new_tokens"))
    return Answer(clean_line(reply), memory, trace)


__all__ = ["ACE", "IterativeRetrieval", "answer_without_retrieval", "answer_with_all_passages", "clean_line", "THINK", "RETRIEVE"]
