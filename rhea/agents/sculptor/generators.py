"""Generators with native tool calling, for `SculptorLoop` (``supports_tools = True``).

- `ChatTemplateToolGenerator`: a local HF model whose chat template renders `tools`
  (transformers' convention: ``apply_chat_template(messages, tools=schemas,
  add_generation_prompt=True)``; Qwen2.5's template does, SmolLM2's does not).
- `EndpointToolGenerator`: an OpenAI-compatible endpoint, sent ``tools=`` and read back
  from the response's ``message.tool_calls``.
- `TextToolGenerator`: a local HF model whose template does not render tools (the loop
  describes them in its system prompt);
- `tool_generator(model, tokenizer)`: the chat-template generator when the template
  renders tools, else the text one.

``tool_choice="required"`` (the paper's first-step setting, section 3.1) is honoured by all
three (``supports_tool_choice = True``): the endpoint forwards it to the API; the local ones
constrain the reply to open a call to one of the given tools, the way an API's constrained
decoding does: the model scores each tool's name after ``<tool_call>\n{"name": "`` (its
log-likelihood, one pass over the prompt, its KV cache reused for every name), the best one
(greedy; sampled by softmax when temperature > 0) is written, and the reply is prefilled
with ``<tool_call>\n{"name": "<tool>", "arguments": {`` before the model writes the
arguments. Which tool and which arguments stay the model's choice.

Both return text the loop parses with `parse_tool_calls`: the model's own text for a local
model, and the endpoint's content plus one Hermes ``<tool_call>`` block per returned call
(arguments verbatim, so a malformed call reaches the loop as one and is reported to the model).
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from rhea.agents.sculptor.schemas import tool_schemas
from rhea.agents.toolcalls import parse_tool_calls
from rhea.backends.llm import HFGenerator, OpenAICompatibleGenerator
from rhea.errors import RheaConfigError

_PROBE_TOOL = "rhea_template_tool_probe"


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a `tools=` list into the prompt.

    >>> from rhea.testing import tiny_tokenizer
    >>> template_supports_tools(tiny_tokenizer())   # plain ChatML: tools would be dropped
    False
    """
    if not getattr(tokenizer, "chat_template", None):
        return False
    probe = [{"type": "function", "function": {"name": _PROBE_TOOL, "description": "probe",
                                               "parameters": {"type": "object", "properties": {}}}}]
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=probe, tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # a template that chokes on tools= does not support them  # noqa: BLE001
        return False
    return _PROBE_TOOL in text


#: What a local generator prefills for ``tool_choice="required"``: the opening of a Hermes
#: call, so the model's first tokens are a tool's name.
TOOL_CALL_PREFILL = '<tool_call>\n{"name": "'
TOOL_CHOICES = ("auto", "required", "none")


def _check_tool_choice(tool_choice: str | None) -> None:
    if tool_choice is not None and tool_choice not in TOOL_CHOICES:
        raise RheaConfigError(f"tool_choice={tool_choice!r} must be one of {', '.join(TOOL_CHOICES)} (or None)")


class _ToolsTemplateTokenizer:
    """The wrapped tokenizer, with `tools` added to every `apply_chat_template` call while set,
    and `prefill` appended to the rendered prompt text (the reply's forced opening) while set."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self.tools: list[dict] | None = None
        self.prefill: str | None = None

    def apply_chat_template(self, messages, **kwargs):
        if self.tools is not None:
            kwargs["tools"] = self.tools
        text = self._tokenizer.apply_chat_template(messages, **kwargs)
        if self.prefill and isinstance(text, str) and kwargs.get("add_generation_prompt"):
            text += self.prefill
        return text

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


class _LocalToolGenerator:
    """What the two local generators share: `HFGenerator` behind a tools-aware tokenizer, and a
    `generate` whose ``tool_choice="required"`` prefills the opening of a call to one of `tools`.
    Subclasses set ``self.hf`` and ``self._tokenizer`` and say whether the template renders tools
    (``supports_tools``); one that does not is told the tools by the loop's system prompt."""

    supports_tools = False
    supports_tool_choice = True

    #: prompt tokens kept free for the forced opening of a call (``tool_choice="required"``)
    PREFILL_TOKENS = 32

    @property
    def tokenizer(self):
        return self._tokenizer._tokenizer

    def prompt_room(self, max_new_tokens: int) -> int | None:
        """The most prompt tokens for a reply of `max_new_tokens` (the model's window, less the room a
        forced call's opening takes); None when the model declares no window."""
        room = self.hf.prompt_room(max_new_tokens)
        return None if room is None else room - self.PREFILL_TOKENS

    def count_prompt_tokens(self, messages) -> int:
        """Tokens of `messages` as `generate` renders them (with the Sculptor tools, when the template shows them)."""
        self._tokenizer.tools = tool_schemas() if self.supports_tools else None
        try:
            return self.hf.count_prompt_tokens(messages)
        finally:
            self._tokenizer.tools = None

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, tools=None,
                 tool_choice=None) -> str:
        """The reply; with ``tool_choice="required"`` it is a call to one of `tools` (a template that
        renders tools needs them given)."""
        _check_tool_choice(tool_choice)
        shown = tools if self.supports_tools and tool_choice != "none" else None
        required = tool_choice == "required" and (bool(tools) or not self.supports_tools)
        prefill = _required_prefill(self.hf, self._tokenizer, messages, shown, tools, temperature) if required else None
        return _prefilled(self.hf, self._tokenizer, messages, shown, prefill,
                          max_new_tokens=max_new_tokens, temperature=temperature, stop=stop)

    @property
    def prompt_tokens(self) -> int:
        return self.hf.prompt_tokens

    @property
    def cached_prompt_tokens(self) -> int:
        """Of `prompt_tokens`, those read from the kept KV prefix instead of recomputed."""
        return self.hf.cached_prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.hf.completion_tokens


class ChatTemplateToolGenerator(_LocalToolGenerator):
    """A local HF model prompted through its chat template's own tool format.

    Generation is `HFGenerator`'s (greedy/sampling, token counters, adapters); only the
    template call gains ``tools=``. Raises if the template would silently drop the tools.

    >>> from rhea.agents.sculptor import tool_schemas
    >>> from rhea.testing import tiny_llama, tiny_tokenizer
    >>> tok = tiny_tokenizer(); tok.chat_template = TOOLS_CHATML_TEMPLATE
    >>> gen = ChatTemplateToolGenerator(tiny_llama(len(tok)), tok)
    >>> "fold_fragment" in gen.render([{"role": "user", "content": "hi"}], tools=tool_schemas())
    True
    """

    supports_tools = True

    def __init__(self, model, tokenizer=None, *, adapter: str | None = None, seed: int | None = None,
                 prefix_cache: bool = True):
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if tokenizer is not None and not template_supports_tools(tokenizer):
            raise RheaConfigError(
                "the tokenizer's chat template does not render tools= (it would drop them); use "
                "tool_generator(model, tokenizer), which falls back to text-described tools, or set a "
                "tool-aware tokenizer.chat_template"
            )
        self._tokenizer = _ToolsTemplateTokenizer(tokenizer) if tokenizer is not None else None
        # each step of the tool loop re-sends the transcript so far: keep its KV cache (HFGenerator)
        self.hf = HFGenerator(model, self._tokenizer, adapter=adapter, seed=seed, prefix_cache=prefix_cache)

    def render(self, messages: Sequence[dict], tools: list[dict] | None = None) -> str:
        """The exact prompt text `generate` feeds the model."""
        from rhea.backends.chat_template import escape_messages

        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        return self.tokenizer.apply_chat_template(escape_messages(self.tokenizer, plain), tools=tools, tokenize=False,
                                                  add_generation_prompt=True)



def tool_names(tools: Sequence[dict] | None) -> list[str]:
    """The function names in OpenAI tool schemas.

    >>> tool_names([{"type": "function", "function": {"name": "f"}}])
    ['f']
    """
    return [t["function"]["name"] for t in tools or () if isinstance(t, dict) and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)]


def _required_prefill(hf: HFGenerator, tokenizer: _ToolsTemplateTokenizer, messages, shown_tools, tools,
                      temperature: float) -> str:
    """`TOOL_CALL_PREFILL` + the tool name the model scores highest + the opening of its arguments."""
    names = tool_names(tools)
    if not names:
        return TOOL_CALL_PREFILL
    name = names[0] if len(names) == 1 else _choose_name(hf, tokenizer, messages, shown_tools, names, temperature)
    return f'{TOOL_CALL_PREFILL}{name}", "arguments": {{'


def _choose_name(hf: HFGenerator, tokenizer: _ToolsTemplateTokenizer, messages, shown_tools, names: list[str],
                 temperature: float) -> str:
    import torch

    from rhea.backends.chat_template import apply_chat_template

    tokenizer.tools, tokenizer.prefill = shown_tools, TOOL_CALL_PREFILL
    try:
        prompt = apply_chat_template(tokenizer, [{"role": m["role"], "content": m["content"]} for m in messages])
    finally:
        tokenizer.tools, tokenizer.prefill = None, None
    raw = tokenizer._tokenizer

    def encode(text: str) -> list[int]:
        return list(raw(text, add_special_tokens=False)["input_ids"])

    # each candidate is the prompt + name + closing quote (a name's first token may merge with the quote)
    scores, read = hf.continuation_logprobs(prompt, [name + '"' for name in names], encode=encode)
    hf.prompt_tokens += read
    if temperature and temperature > 0:
        probs = torch.softmax(torch.tensor(scores) / float(temperature), -1)
        return names[int(torch.multinomial(probs, 1))]
    return names[max(range(len(names)), key=scores.__getitem__)]


def _prefilled(hf: HFGenerator, tokenizer: _ToolsTemplateTokenizer, messages, tools, prefill, **kwargs) -> str:
    tokenizer.tools, tokenizer.prefill = tools, prefill
    try:
        text = hf.generate(messages, **kwargs)
    finally:
        tokenizer.tools, tokenizer.prefill = None, None
    # The prefill is part of the reply the model gave (the prompt only held it to force it).
    return f"{prefill}{text}" if prefill else text


class TextToolGenerator(_LocalToolGenerator):
    """A local HF model whose chat template has no tool format: the loop describes the tools
    in its system prompt (`rhea.agents.sculptor.prompts.TOOL_FORMAT_TEMPLATE`) and parses
    Hermes ``<tool_call>`` blocks from the text. ``tool_choice="required"`` with `tools` (used
    only to know the names; they are not rendered) makes the reply a call to one of them.

    >>> from rhea.agents.sculptor import tool_schemas
    >>> from rhea.testing import tiny_llama, tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> gen = TextToolGenerator(tiny_llama(len(tok)), tok)
    >>> reply = gen.generate([{"role": "user", "content": "hi"}], max_new_tokens=2, tool_choice="required",
    ...                      tools=tool_schemas())
    >>> reply.startswith(TOOL_CALL_PREFILL) and reply.split('"')[3] in tool_names(tool_schemas())
    True
    """

    supports_tools = False

    def __init__(self, model, tokenizer=None, *, adapter: str | None = None, seed: int | None = None,
                 prefix_cache: bool = True):
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if tokenizer is None:
            raise RheaConfigError("TextToolGenerator needs a tokenizer: pass tokenizer= (a RheaForCausalLM carries its own)")
        self._tokenizer = _ToolsTemplateTokenizer(tokenizer)
        # each step of the tool loop re-sends the transcript so far: keep its KV cache (HFGenerator)
        self.hf = HFGenerator(model, self._tokenizer, adapter=adapter, seed=seed, prefix_cache=prefix_cache)



def tool_generator(model, tokenizer=None, **kwargs) -> ChatTemplateToolGenerator | TextToolGenerator:
    """Native chat-template tool calling when the template supports it, else text-described tools.

    >>> from rhea.testing import tiny_llama, tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> type(tool_generator(tiny_llama(len(tok)), tok)).__name__
    'TextToolGenerator'
    """
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is not None and template_supports_tools(tokenizer):
        return ChatTemplateToolGenerator(model, tokenizer, **kwargs)
    return TextToolGenerator(model, tokenizer, **kwargs)


class EndpointToolGenerator:
    """OpenAI-compatible function calling: ``tools=`` in the request, ``tool_calls`` in the reply.

    The loop's transcript (assistant text with ``<tool_call>`` blocks, then ``role: tool``
    messages) is sent the way the API expects it: assistant messages carry structured
    ``tool_calls`` with ids and each tool message the ``tool_call_id`` it answers.

    >>> openai_messages([{"role": "assistant", "content": '{"name": "f", "arguments": {}}'},
    ...                  {"role": "tool", "name": "f", "content": "{}"}])[1]
    {'role': 'tool', 'tool_call_id': 'call_0_0', 'content': '{}'}
    """

    supports_tools = True
    supports_tool_choice = True

    def __init__(self, client: OpenAICompatibleGenerator):
        if not callable(getattr(client, "chat", None)):
            raise TypeError(f"client must be an OpenAICompatibleGenerator (with .chat), got {type(client).__name__}")
        self.client = client

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, tools=None,
                 tool_choice=None) -> str:
        _check_tool_choice(tool_choice)
        params: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            params["stop"] = list(stop)
        if tools:
            params["tools"] = tools
            if tool_choice is not None:
                params["tool_choice"] = tool_choice  # the API's own setting, sent as is
        data = self.client.chat(openai_messages(messages), **params)
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise RheaConfigError(f"unexpected chat-completion response from {self.client.base_url}: {str(data)[:300]}") from exc
        content = (message.get("content") or "").strip()
        blocks = [_hermes_block(call) for call in message.get("tool_calls") or []]
        return "\n".join(part for part in (content, *blocks) if part)

    @property
    def prompt_tokens(self) -> int:
        return self.client.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.client.completion_tokens


def openai_messages(messages: Sequence[dict]) -> list[dict]:
    """The loop's messages in chat-completions form (structured tool calls, tool_call_ids).

    A tool message that answers no call (e.g. the loop's note on an unreadable call) is
    sent as a user message, so the endpoint still sees it.
    """
    out: list[dict] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) not yet answered
    for index, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "assistant":
            parsed = parse_tool_calls(content)
            if parsed.calls:
                ids = [f"call_{index}_{k}" for k in range(len(parsed.calls))]
                pending = list(zip(ids, (c.name for c in parsed.calls)))
                out.append({"role": "assistant", "content": parsed.text or None, "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for i, c in zip(ids, parsed.calls)]})
                continue
        if role == "tool":
            match = next((p for p in pending if p[1] == message.get("name")), None)
            if match is not None:
                pending.remove(match)
                out.append({"role": "tool", "tool_call_id": match[0], "content": content})
            else:
                out.append({"role": "user", "content": f"[{message.get('name', 'tool')} result]\n{content}"})
            continue
        out.append({"role": role, "content": content})
    return out


def _hermes_block(call: dict) -> str:
    function = call.get("function") or {}
    arguments = function.get("arguments", {})
    arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>\n{{"name": {json.dumps(function.get("name"))}, "arguments": {arguments_text or "{}"}}}\n</tool_call>'


#: A ChatML template that renders `tools` the Hermes/Qwen way (for tests and tiny models).
TOOLS_CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    "Call a tool as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n"
    "</tool_response><|im_end|>\n{% elif m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
