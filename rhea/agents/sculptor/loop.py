"""`SculptorLoop`: a model answers a query while sculpting its own history with tools.

Each round the generator sees

    [system: unified prompt (+ tool description)] + store.render() + [user: query] + trail

where the trail holds the model's earlier replies in this run and one tool message per
call, fitted to the generator's window (`rhea.context.budget.fit_inner`): the oldest history
messages give way first, each cut recorded in `SculptorLoop.budget_records`. A reply with no
tool call is the final answer. When `max_tool_calls` calls have been spent, the loop asks once
more for an answer without tools and records that the budget ran out.

Tools reach the generator two ways. By default their schemas are described in the system
prompt, so any `TextGenerator` works and calls are parsed from its text (Hermes, Llama,
fenced JSON or OpenAI-style; see `rhea.agents.toolcalls`). A generator whose
`supports_tools` attribute is True (or with `native_tools=True`) is called as
`generate(messages, tools=schemas, ...)` instead — e.g. one that renders
`tokenizer.apply_chat_template(messages, tools=schemas)` or forwards `tools` to an
OpenAI-compatible endpoint — and the description is left out of the system prompt.

`force_first_tool=True` is the paper's ``tool_choice="required"`` on the first step of a run
(section 3.1). A generator with ``supports_tool_choice = True`` gets
``tool_choice="required"`` (and the schemas) for that generation: an endpoint passes it to
the API, a local model is constrained to open a call to one of the six tools (see
`rhea.agents.sculptor.generators`), so the first reply is a call. A generator without it
(e.g. `ScriptedGenerator`) falls back to a nudge: a first reply without a call is answered
with `FORCE_TOOL_PROMPT` once, and the model asked again (step kind "nudged").
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from rhea.agents.sculptor.errors import ConversationMismatchError
from rhea.agents.sculptor.prompts import (
    BUDGET_EXHAUSTED_PROMPT,
    FORCE_TOOL_PROMPT,
    MALFORMED_CALL_MESSAGE,
    PAPER_UNIFIED_PROMPT,
    tool_description,
)
from rhea.agents.sculptor.tools import SculptorToolbox
from rhea.agents.toolcalls import ParsedToolCalls, parse_tool_calls
from rhea.backends.llm import TextGenerator
from rhea.context.budget import fit_inner
from rhea.errors import RheaConfigError

#: Name recorded for a reply whose tool call could not be read.
MALFORMED = "<malformed>"
#: `TraceEntry.error_type` of an unreadable call, and of a call refused because the budget was spent.
MALFORMED_ERROR, OVER_BUDGET_ERROR = "MalformedCall", "OverBudget"


@dataclass(frozen=True)
class TraceEntry:
    """One tool call the model made: what it asked, what came back."""

    step: int  # index into LoopResult.steps of the reply that made the call
    name: str
    arguments: dict
    result: str  # the tool message content
    error: str | None
    changed_view: bool  # whether the visible history changed
    error_type: str | None = None  # class name of the error ("MalformedCall" for an unreadable call)


@dataclass(frozen=True)
class Step:
    """One generation: the exact prompt, the completion, and where each prompt message came from.

    `sources[i]` is the index of the step that generated `prompt[i]` (an earlier reply in
    this run) or None (system, history, query, tool results). `changed_view` says whether
    the tool calls in this completion changed the visible history; `results` holds the tool
    messages that answered them (Algorithm 1's T_i).
    """

    prompt: list[dict]
    completion: str
    sources: list[int | None]
    kind: str  # "tool_call" | "final" | "nudged" | "budget_final"
    changed_view: bool = False
    results: tuple[dict, ...] = ()  # the tool messages answering this completion's calls (T_i)


@dataclass
class LoopResult:
    answer: str
    messages: list[dict]  # the managed context the answer was given in, plus the answer
    trace: list[TraceEntry]
    n_tool_calls: int
    budget_exhausted: bool = False
    steps: list[Step] = field(default_factory=list)


class SculptorLoop:
    """Run a tool-calling model over a sculptable history until it answers.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> from rhea.agents.sculptor import AcmStore, SculptorToolbox
    >>> history = [{"role": "user", "content": "k=1. k=2. k=3."}, {"role": "assistant", "content": "ok"}]
    >>> gen = ScriptedGenerator(['<tool_call>{"name": "search_context", "arguments": {"query": "k="}}</tool_call>',
    ...                          "k is 3"])
    >>> loop = SculptorLoop(gen, SculptorToolbox(AcmStore(history), ScriptedGenerator([])))
    >>> result = loop.run(history, "What is k now?")
    >>> result.answer, result.n_tool_calls, result.trace[0].name
    ('k is 3', 1, 'search_context')
    """

    def __init__(self, generator: TextGenerator, toolbox: SculptorToolbox, system_prompt: str = PAPER_UNIFIED_PROMPT,
                 max_tool_calls: int = 20, force_first_tool: bool = False, *, native_tools: bool | None = None,
                 max_new_tokens: int = 512, temperature: float = 0.0, tool_role: str = "tool"):
        if not callable(getattr(generator, "generate", None)):
            raise TypeError(f"generator must be a TextGenerator (with .generate), got {type(generator).__name__}")
        if not isinstance(toolbox, SculptorToolbox):
            raise TypeError(f"toolbox must be a SculptorToolbox, got {type(toolbox).__name__}")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int) or max_tool_calls < 0:
            raise RheaConfigError(f"max_tool_calls={max_tool_calls!r} must be an int >= 0")
        if not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a str, got {type(system_prompt).__name__}")
        self.generator = generator
        self.toolbox = toolbox
        self.max_tool_calls = max_tool_calls
        self.force_first_tool = force_first_tool
        self.native_tools = bool(getattr(generator, "supports_tools", False)) if native_tools is None else native_tools
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.tool_role = tool_role
        #: ``inner_budget`` records of the prompts cut to the generator's window
        self.budget_records: list[dict] = []
        self.system_prompt = system_prompt if self.native_tools else (
            f"{system_prompt}\n\n{tool_description(toolbox.schemas())}".strip()
        )

    def run(self, messages: list[dict], query: str, *, system: str | None = None) -> LoopResult:
        """Answer `query` after the history `messages`, letting the model sculpt that history.

        `messages` must continue the toolbox store's conversation: equal to it, or with new
        messages appended (they are added to the store, so earlier folds persist across turns).
        `system` (e.g. standing instructions) joins the system message after the loop's own
        prompt; unlike the history it is not sculptable.
        """
        if not isinstance(query, str) or not query.strip():
            raise RheaConfigError(f"query={query!r} must be a non-empty str")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a str or None, got {type(system).__name__}")
        self._sync(messages)
        run = _Run(query, system or "")
        while True:
            prompt, sources = self._prompt(run)
            first = not run.steps
            reply = self._generate(prompt, with_tools=True, required=first and self.force_first_tool)
            parsed = parse_tool_calls(reply)
            step_index = len(run.steps)
            if not parsed.calls and not parsed.errors:
                if self.force_first_tool and run.n_calls == 0 and not run.nudged:
                    run.nudged = True
                    run.steps.append(Step(prompt, reply, sources, "nudged"))
                    run.add({"role": "assistant", "content": reply}, step_index)
                    run.add({"role": "user", "content": FORCE_TOOL_PROMPT}, None)
                    continue
                run.steps.append(Step(prompt, reply, sources, "final"))
                return self._result(run, parsed.text or reply.strip(), prompt, budget_exhausted=False)
            run.add({"role": "assistant", "content": reply}, step_index)
            before = len(run.trail)
            changed = self._execute(run, parsed, step_index)
            results = tuple(dict(m) for m in run.trail[before:])
            run.steps.append(Step(prompt, reply, sources, "tool_call", changed, results))
            if run.n_calls >= self.max_tool_calls:
                return self._final_without_tools(run)

    # ------------------------------------------------------------------ internals
    def _execute(self, run: "_Run", parsed: ParsedToolCalls, step_index: int) -> bool:
        changed = False
        if parsed.errors:
            # An unreadable call still spends budget, so a model stuck on bad syntax stops.
            problem = MALFORMED_CALL_MESSAGE.format(problems="; ".join(parsed.errors))
            self._record(run, step_index, MALFORMED, {}, json.dumps({"error": problem}), problem, False,
                         error_type=MALFORMED_ERROR)
        for call in parsed.calls:
            if run.n_calls >= self.max_tool_calls:
                problem = f"tool budget of {self.max_tool_calls} calls is spent; {call.name} was not run"
                self._record(run, step_index, call.name, call.arguments, json.dumps({"error": problem}), problem,
                             False, spend=False, error_type=OVER_BUDGET_ERROR)
                continue
            outcome = self.toolbox.execute(call.name, call.arguments)
            self._record(run, step_index, call.name, call.arguments, outcome.content, outcome.error, outcome.changed_view,
                         error_type=outcome.error_type)
            changed |= outcome.changed_view
        return changed

    def _record(self, run: "_Run", step: int, name: str, arguments: dict, content: str, error: str | None,
                changed: bool, *, spend: bool = True, error_type: str | None = None) -> None:
        run.n_calls += spend
        run.add(self._tool_message(name, content), None)
        run.trace.append(TraceEntry(step, name, dict(arguments), content, error, changed, error_type))

    def _final_without_tools(self, run: "_Run") -> LoopResult:
        run.add({"role": "user", "content": BUDGET_EXHAUSTED_PROMPT.format(max_tool_calls=self.max_tool_calls)}, None)
        prompt, sources = self._prompt(run)
        reply = self._generate(prompt, with_tools=False)
        run.steps.append(Step(prompt, reply, sources, "budget_final"))
        # Whatever tool call the model still writes is not run; its prose is the answer.
        answer = parse_tool_calls(reply).text or reply.strip()
        return self._result(run, answer, prompt, budget_exhausted=True)

    def _result(self, run: "_Run", answer: str, prompt: list[dict], *, budget_exhausted: bool) -> LoopResult:
        final = [*prompt, {"role": "assistant", "content": run.steps[-1].completion}]
        return LoopResult(answer, final, run.trace, run.n_calls, budget_exhausted, run.steps)

    def _prompt(self, run: "_Run") -> tuple[list[dict], list[int | None]]:
        history = self.toolbox.store.render()
        system = "\n\n".join(part for part in (self.system_prompt, run.system) if part.strip())
        if history and history[0]["role"] == "system":
            # One system message: many chat templates reject or drop a second one.
            system = f"{system}\n\n{history[0]['content']}"
            history = history[1:]
        head = [{"role": "system", "content": system}, *history, {"role": "user", "content": run.query}]
        # fitted to the generator's window: the oldest history gives way first, the query and this run's trail stay
        prompt = fit_inner(self.generator, [*head, *run.trail], self.max_new_tokens, call="sculptor.loop",
                           record=self.budget_records, keep_last=1 + len(run.trail))
        return prompt, [None] * (len(prompt) - len(run.trail)) + list(run.sources)

    def _generate(self, prompt: list[dict], *, with_tools: bool, required: bool = False) -> str:
        kwargs = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature}
        if self.native_tools and with_tools:
            kwargs["tools"] = self.toolbox.schemas()
        if required and with_tools and getattr(self.generator, "supports_tool_choice", False):
            kwargs["tool_choice"] = "required"
            # A text-tools generator does not render them, but needs their names to force a call.
            kwargs.setdefault("tools", self.toolbox.schemas())
        reply = self.generator.generate([dict(m) for m in prompt], **kwargs)
        if not isinstance(reply, str):
            raise TypeError(f"generator returned {type(reply).__name__}, expected str")
        return reply

    def _tool_message(self, name: str, content: str) -> dict:
        return {"role": self.tool_role, "name": name, "content": content}

    def _sync(self, messages: list[dict]) -> None:
        store = self.toolbox.store
        known = store.original
        if not isinstance(messages, list) or messages[:len(known)] != known:
            first = next((i for i, (a, b) in enumerate(zip(messages, known)) if a != b), min(len(messages), len(known)))
            raise ConversationMismatchError(
                f"messages do not continue the store's conversation (first difference at index {first}, "
                f"store has {len(known)} messages, got {len(messages) if isinstance(messages, list) else messages!r}); "
                "build a new AcmStore and SculptorToolbox for a different conversation"
            )
        store.extend(messages[len(known):])


class _Run:
    """Mutable state of one `run` call."""

    def __init__(self, query: str, system: str = ""):
        self.query = query
        self.system = system
        self.trail: list[dict] = []
        self.sources: list[int | None] = []
        self.steps: list[Step] = []
        self.trace: list[TraceEntry] = []
        self.n_calls = 0
        self.nudged = False

    def add(self, message: dict, source: int | None) -> None:
        self.trail.append(message)
        self.sources.append(source)
