"""`SculptorPolicy`: Sculptor as a context policy ("sculptor" in the policy registry).

The policy keeps one `AcmStore` over the whole conversation. Each `build` appends the turns
it has not seen (so folds and summaries made in earlier turns carry over), then runs a
`SculptorLoop` for the query: the model may fragment, fold, summarize, restore and search
its history (at most `max_tool_calls` calls) and then answers. The plan holds

- messages: [system (if any)] + the sculpted history as the store shows it now + [user: query];
- decisions.turns: one "raw" decision per turn (a sculpted turn is still text), noting the
  fragments folded or summarized inside it;
- decisions.records: one ``{"event": "tool_call", ...}`` per call, then one
  ``{"event": "sculptor_answer", "answer": ...}`` with the loop's final answer, which a chat
  session can use directly (`loop_answer(plan)`) instead of generating again;
- ledger: visible tokens of the plan vs the same messages unsculpted.
"""
from __future__ import annotations

from typing import Any

from rhea.agents.sculptor.loop import LoopResult, SculptorLoop
from rhea.agents.sculptor.prompts import PAPER_UNIFIED_PROMPT
from rhea.agents.sculptor.store import FOLDED, SUMMARIZED, AcmStore
from rhea.agents.sculptor.tools import SculptorToolbox
from rhea.backends.llm import TextGenerator
from rhea.context.conversation import Conversation, Turn
from rhea.context.plan import ContextPlan, PlanDecisions, TokenLedger, TurnDecision
from rhea.errors import RheaConfigError
from rhea.policies.assemble import SystemSource, count_tokens, resolve_system
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.validation import positive_int

#: Tool calls allowed per turn (the paper's loop budget).
DEFAULT_MAX_TOOL_CALLS = 20
ANSWER_EVENT = "sculptor_answer"
TOOL_CALL_EVENT = "tool_call"


def turn_messages(turns) -> list[dict]:
    """Turns as chat messages: user, assistant, user, assistant, ...

    >>> turn_messages([Turn("hi", "hello")])
    [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}]
    """
    out = []
    for turn in turns:
        out += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.assistant}]
    return out


def loop_answer(plan: ContextPlan) -> str | None:
    """The answer the Sculptor loop gave while building `plan` (None for other policies).

    >>> loop_answer(ContextPlan([{"role": "user", "content": "q"}]))
    """
    for record in reversed(plan.decisions.records):
        if record.get("event") == ANSWER_EVENT:
            return record["answer"]
    return None


@register_policy("sculptor")
class SculptorPolicy(ContextPolicy):
    """The model sculpts its own history with reversible tools, then answers.

    generator: the tool-calling model (text-described tools by default; native `tools=` when
    it has ``supports_tools = True``, see `rhea.agents.sculptor.generators`).
    summarizer: writes `summarize_fragment` summaries (default: the generator itself).

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> policy = SculptorPolicy(ScriptedGenerator([
    ...     '<tool_call>{"name": "search_context", "arguments": {"query": "cat"}}</tool_call>', "Tom."]))
    >>> plan = policy.build(Conversation([Turn("My cat is Tom.", "Nice!")]), "Cat's name?")
    >>> loop_answer(plan), [r["name"] for r in plan.decisions.records if r["event"] == "tool_call"]
    ('Tom.', ['search_context'])
    """

    controller_arg = "generator"

    def __init__(self, generator: TextGenerator, *, summarizer: TextGenerator | None = None,
                 max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS, force_first_tool: bool = False,
                 native_tools: bool | None = None, max_new_tokens: int = 256, summary_max_new_tokens: int = 256,
                 loop_prompt: str = PAPER_UNIFIED_PROMPT, seed: int = 0,
                 system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        for name, value in (("generator", generator), ("summarizer", summarizer)):
            if value is not None and not callable(getattr(value, "generate", None)):
                raise TypeError(f"{name} must be a TextGenerator (with .generate), got {type(value).__name__}")
        if generator is None:
            raise TypeError("generator must be a TextGenerator (with .generate), got None")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int) or max_tool_calls < 0:
            raise RheaConfigError(f"max_tool_calls={max_tool_calls!r} must be an int >= 0")
        self.generator = generator
        self.summarizer = summarizer if summarizer is not None else generator
        self.max_tool_calls = max_tool_calls
        self.force_first_tool = bool(force_first_tool)
        self.native_tools = native_tools
        self.max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
        self.summary_max_new_tokens = positive_int(summary_max_new_tokens, "summary_max_new_tokens")
        self.loop_prompt = loop_prompt
        self.seed = seed
        self.reset()

    def config(self) -> dict:
        return {"max_tool_calls": self.max_tool_calls, "force_first_tool": self.force_first_tool,
                "native_tools": self.native_tools, "max_new_tokens": self.max_new_tokens,
                "summary_max_new_tokens": self.summary_max_new_tokens, "seed": self.seed}

    def planned_answer(self, plan: ContextPlan) -> str | None:
        """The loop answers while planning: the session uses that answer instead of generating again."""
        return loop_answer(plan)

    def reset(self) -> None:
        self.store = AcmStore([], seed=self.seed)
        self.last_result: LoopResult | None = None

    # ------------------------------------------------------------------ policy API
    def observe(self, turn: Turn) -> None:
        """Append a finished turn to the store (`build` also catches up on unseen turns)."""
        super().observe(turn)
        self.store.extend(turn_messages([turn]))

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        history = self._sync(conversation)
        system_text, instructions = resolve_system(self.system_prompt)
        loop = self._loop()
        result = loop.run(history, query, system=system_text or None)
        self.last_result = result
        visible = self.store.render()
        messages = ([{"role": "system", "content": system_text}] if system_text.strip() else []) + [
            *visible, {"role": "user", "content": query}]
        records = ([self._call_record(t) for t in result.trace] + loop.budget_records + loop.toolbox.budget_records
                   + [self._answer_record(result)])
        decisions = PlanDecisions(self._turn_decisions(len(conversation)), instructions, records)
        return ContextPlan(messages, decisions, self._ledger(system_text, visible, query), self.name)

    # ------------------------------------------------------------------- internals
    def _loop(self) -> SculptorLoop:
        toolbox = SculptorToolbox(self.store, self.summarizer, summary_max_new_tokens=self.summary_max_new_tokens)
        return SculptorLoop(self.generator, toolbox, self.loop_prompt, self.max_tool_calls, self.force_first_tool,
                            native_tools=self.native_tools, max_new_tokens=self.max_new_tokens)

    def _sync(self, conversation: Conversation) -> list[dict]:
        if not isinstance(conversation, Conversation):
            raise TypeError(f"build() takes a Conversation, got {type(conversation).__name__}")
        messages = turn_messages(conversation.turns)
        known = self.store.original
        if messages[:len(known)] != known:
            raise RheaConfigError(
                f"sculptor policy holds {len(known) // 2} turns that the conversation (of {len(conversation)} turns) "
                "does not start with; call reset() before starting another conversation"
            )
        self.store.extend(messages[len(known):])
        return messages

    def _turn_decisions(self, n_turns: int) -> list[TurnDecision]:
        sculpted: dict[int, list[str]] = {}
        for frag in self.store.fragments.values():
            if frag.state in (FOLDED, SUMMARIZED):
                sculpted.setdefault(frag.message_index // 2, []).append(f"{frag.state} {frag.id}")
        return [TurnDecision(i, "raw", None, "; ".join(sorted(sculpted[i])) if i in sculpted else "as is")
                for i in range(n_turns)]

    def _ledger(self, system_text: str, visible: list[dict], query: str) -> TokenLedger:
        def count(text: str) -> int:
            return count_tokens(text, self.tokenizer)

        fixed = count(system_text) + count(query)
        return TokenLedger(
            text_tokens=fixed + sum(count(m["content"]) for m in visible),
            full_history_tokens=fixed + sum(count(m["content"]) for m in self.store.original),
            counter="tokenizer" if self.tokenizer is not None else "regex-approx",
        )

    @staticmethod
    def _call_record(entry) -> dict:
        return {"event": TOOL_CALL_EVENT, "step": entry.step, "name": entry.name, "arguments": entry.arguments,
                "error": entry.error, "changed_view": entry.changed_view, "result": entry.result}

    @staticmethod
    def _answer_record(result: LoopResult) -> dict:
        return {"event": ANSWER_EVENT, "answer": result.answer, "n_tool_calls": result.n_tool_calls,
                "budget_exhausted": result.budget_exhausted, "generations": len(result.steps)}

    def _state(self) -> dict:
        return {"store": self.store.state_dict()}

    def _load_state(self, state: dict) -> None:
        if "store" not in state:
            raise RheaConfigError("sculptor state lacks 'store'; pass what state_dict() returned")
        self.store = AcmStore.from_state_dict(state["store"])
        self.last_result = None
