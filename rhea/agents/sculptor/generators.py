"""Generators with native tool calling, for `SculptorLoop` (``supports_tools = True``).

- `ChatTemplateToolGenerator`: a local HF model whose chat template renders `tools`
  (transformers' convention: ``apply_chat_template(messages, tools=schemas,
  add_generation_prompt=True)``; Qwen2.5's template does, SmolLM2's does not).
- `EndpointToolGenerator`: an OpenAI-compatible endpoint, sent ``tools=`` and read back
  from the response's ``message.tool_calls``.
- `tool_generator(model, tokenizer)`: the chat-template generator when the template
  renders tools, else a plain `HFGenerator` (the loop then describes the tools in text).

Both return text the loop parses with `parse_tool_calls`: the model's own text for a local
model, and the endpoint's content plus one Hermes ``<tool_call>`` block per returned call
(arguments verbatim, so a malformed call reaches the loop as one and is reported to the model).
"""
from __future__ import annotations

import json
from typing import Any, Sequence

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


class _ToolsTemplateTokenizer:
    """The wrapped tokenizer, with `tools` added to every `apply_chat_template` call while set."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self.tools: list[dict] | None = None

    def apply_chat_template(self, messages, **kwargs):
        if self.tools is not None:
            kwargs["tools"] = self.tools
        return self._tokenizer.apply_chat_template(messages, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


class ChatTemplateToolGenerator:
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

    def __init__(self, model, tokenizer=None, *, adapter: str | None = None, seed: int | None = None):
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if tokenizer is not None and not template_supports_tools(tokenizer):
            raise RheaConfigError(
                "the tokenizer's chat template does not render tools= (it would drop them); use "
                "tool_generator(model, tokenizer), which falls back to text-described tools, or set a "
                "tool-aware tokenizer.chat_template"
            )
        self._tokenizer = _ToolsTemplateTokenizer(tokenizer) if tokenizer is not None else None
        self.hf = HFGenerator(model, self._tokenizer, adapter=adapter, seed=seed)

    @property
    def tokenizer(self):
        return self._tokenizer._tokenizer

    def render(self, messages: Sequence[dict], tools: list[dict] | None = None) -> str:
        """The exact prompt text `generate` feeds the model."""
        return self.tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in messages],
                                                  tools=tools, tokenize=False, add_generation_prompt=True)

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, tools=None) -> str:
        self._tokenizer.tools = tools
        try:
            return self.hf.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature, stop=stop)
        finally:
            self._tokenizer.tools = None

    @property
    def prompt_tokens(self) -> int:
        return self.hf.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.hf.completion_tokens


def tool_generator(model, tokenizer=None, **kwargs) -> ChatTemplateToolGenerator | HFGenerator:
    """Native chat-template tool calling when the template supports it, else plain text generation.

    >>> from rhea.testing import tiny_llama, tiny_tokenizer
    >>> tok = tiny_tokenizer()
    >>> type(tool_generator(tiny_llama(len(tok)), tok)).__name__
    'HFGenerator'
    """
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is not None and template_supports_tools(tokenizer):
        return ChatTemplateToolGenerator(model, tokenizer, **kwargs)
    return HFGenerator(model, tokenizer, **kwargs)


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

    def __init__(self, client: OpenAICompatibleGenerator):
        if not callable(getattr(client, "chat", None)):
            raise TypeError(f"client must be an OpenAICompatibleGenerator (with .chat), got {type(client).__name__}")
        self.client = client

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, tools=None) -> str:
        params: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            params["stop"] = list(stop)
        if tools:
            params["tools"] = tools
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
