"""Native tool calling: chat templates with `tools=` (tiny model) and an OpenAI-compatible stub server."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rhea.agents.sculptor import AcmStore, SculptorLoop, SculptorToolbox, tool_schemas
from rhea.agents.sculptor.generators import (TOOL_CALL_PREFILL, TOOLS_CHATML_TEMPLATE, ChatTemplateToolGenerator,
                                             EndpointToolGenerator, TextToolGenerator, openai_messages,
                                             template_supports_tools, tool_generator)
from rhea.agents.sculptor.loop import MALFORMED
from rhea.backends.llm import HFGenerator, OpenAICompatibleGenerator, ScriptedGenerator
from rhea.testing import tiny_llama, tiny_tokenizer

from .sculptor_helpers import hermes

QUERY = "What is the latest value of key_1?"


@pytest.fixture(scope="module")
def tools_model():
    tok = tiny_tokenizer()
    tok.chat_template = TOOLS_CHATML_TEMPLATE
    return tiny_llama(len(tok), max_positions=4096), tok  # the tool-calling prompts run past 512 tokens


def test_template_detection_and_fallback(tools_model):
    model, tok = tools_model
    plain = tiny_tokenizer()
    assert template_supports_tools(tok) and not template_supports_tools(plain)
    broken = tiny_tokenizer()
    broken.chat_template = "{{ raise_exception('no tools here') }}"
    assert not template_supports_tools(broken)
    assert isinstance(tool_generator(model, tok), ChatTemplateToolGenerator)
    fallback = tool_generator(model, plain)
    assert isinstance(fallback, TextToolGenerator) and not getattr(fallback, "supports_tools", False)
    assert isinstance(fallback.hf, HFGenerator) and fallback.supports_tool_choice
    with pytest.raises(ValueError, match="does not render tools="):
        ChatTemplateToolGenerator(model, plain)


def test_chat_template_renders_tools_and_tool_results(tools_model):
    model, tok = tools_model
    gen = ChatTemplateToolGenerator(model, tok)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": hermes("search_context", query="key")},
                {"role": "tool", "name": "search_context", "content": '{"total_matches": 2}'}]
    text = gen.render(messages, tools=tool_schemas())
    assert text.startswith("<|im_start|>system\nbe brief\n\n# Tools\n<tools>\n")
    assert all(json.dumps(s) in text for s in tool_schemas())
    assert '<tool_response>\n{"total_matches": 2}\n</tool_response>' in text
    assert text.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in gen.render(messages)  # without tools= the template leaves them out
    # generate() feeds exactly the rendered prompt (with tools) to the model.
    gen.generate(messages, max_new_tokens=2, tools=tool_schemas())
    assert gen.prompt_tokens == len(tok(text, add_special_tokens=False)["input_ids"])
    assert gen._tokenizer.tools is None  # tools are not left behind for the next call


def _name_scores(model, tok, prompt, names):
    # Reference: each name's log-likelihood from a full forward pass (no cache, no shared prefix).
    scores = []
    base = tok(prompt, add_special_tokens=False)["input_ids"]
    for name in names:
        ids = tok(prompt + name + '"', add_special_tokens=False)["input_ids"]
        k = next(i for i, (a, b) in enumerate(zip(base + [None], ids)) if a != b)
        x = torch.tensor([ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
        scores.append(float(sum(logp[i - 1, ids[i]] for i in range(k, len(ids)))))
    return scores


@pytest.mark.parametrize("native", [True, False])
def test_tool_choice_required_forces_a_call_to_the_likeliest_tool(tools_model, native):
    model, tok = tools_model
    gen = ChatTemplateToolGenerator(model, tok) if native else TextToolGenerator(model, tiny_tokenizer())
    messages = [{"role": "user", "content": "q"}]
    tools = tool_schemas()
    names = [t["function"]["name"] for t in tools]
    prompt = (gen.render(messages, tools=tools) if native else
              gen.tokenizer.apply_chat_template(messages, chat_template=TOOLS_CHATML_TEMPLATE, tokenize=False,
                                                add_generation_prompt=True))
    reply = gen.generate(messages, max_new_tokens=3, tool_choice="required", tools=tools)
    name = reply[len(TOOL_CALL_PREFILL):].split('"')[0]
    assert reply.startswith(f'{TOOL_CALL_PREFILL}{name}", "arguments": {{') and name in names
    # The name is the one the model itself scores highest after the prefill (KV-cached scoring
    # agrees with full forward passes).
    scores = _name_scores(model, tok, prompt + TOOL_CALL_PREFILL, names)
    assert name == names[scores.index(max(scores))]
    assert gen._tokenizer.prefill is None and gen._tokenizer.tools is None
    # One tool: no choice to make. "auto": no prefill. Unknown settings are refused.
    one = gen.generate(messages, max_new_tokens=2, tool_choice="required", tools=tools[2:3])
    assert one.startswith(f'{TOOL_CALL_PREFILL}fold_fragment", "arguments": {{')
    assert not gen.generate(messages, max_new_tokens=3, tool_choice="auto", tools=tools).startswith(TOOL_CALL_PREFILL)
    with pytest.raises(ValueError, match="tool_choice='any'"):
        gen.generate(messages, tool_choice="any", tools=tools)


class ChoiceRecorder(ScriptedGenerator):
    supports_tool_choice = True

    def __init__(self, replies):
        super().__init__(replies)
        self.choices = []

    def generate(self, messages, *, tool_choice=None, tools=None, **kwargs):
        self.choices.append(tool_choice)
        if tool_choice == "required":  # the loop hands over the schemas, so the names are known
            assert [t["function"]["name"] for t in tools] == [s["function"]["name"] for s in tool_schemas()]
        return super().generate(messages, **kwargs)


def test_loop_sends_tool_choice_required_on_the_first_step_only(conversation):
    gen = ChoiceRecorder([hermes("search_context", query="key_1"), hermes("search_context", query="key_2"), "done"])
    loop = SculptorLoop(gen, SculptorToolbox(AcmStore(conversation), ScriptedGenerator([])), force_first_tool=True)
    result = loop.run(conversation, QUERY)
    assert gen.choices == ["required", None, None] and result.answer == "done"
    assert [s.kind for s in result.steps] == ["tool_call", "tool_call", "final"]  # no nudge needed
    gen = ChoiceRecorder(["done"])
    SculptorLoop(gen, SculptorToolbox(AcmStore(conversation), ScriptedGenerator([]))).run(conversation, QUERY)
    assert gen.choices == [None]


def test_loop_runs_natively_on_a_tiny_tool_template_model(tools_model, conversation):
    gen = ChatTemplateToolGenerator(*tools_model)
    loop = SculptorLoop(gen, SculptorToolbox(AcmStore(conversation), ScriptedGenerator([])), max_tool_calls=1,
                        max_new_tokens=3)
    result = loop.run(conversation, QUERY)
    assert loop.native_tools and "<tools>" not in loop.system_prompt
    assert result.n_tool_calls <= 1 and result.steps and gen.completion_tokens > 0


class StubChatServer:
    """Serves canned chat-completion responses on 127.0.0.1 and records each request body."""

    def __init__(self, responses):
        self.responses, self.requests = list(responses), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "body": body})
                payload = json.dumps(stub.responses.pop(0)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def completion(content=None, tool_calls=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7}}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_endpoint_function_calling_round_trip(conversation):
    responses = [
        completion(None, [call("srv-1", "search_context", json.dumps({"query": "key_1"})),
                          call("srv-2", "fold_fragment", '{"fragment_id": "nope00"}')]),
        completion("Checking.", [call("srv-3", "search_context", '{"query": ')]),  # malformed arguments
        completion("The latest value of key_1 is value_10."),
    ]
    with StubChatServer(responses) as server:
        client = OpenAICompatibleGenerator(server.url, "stub-model", api_key="test", timeout=5)
        gen = EndpointToolGenerator(client)
        loop = SculptorLoop(gen, SculptorToolbox(AcmStore(conversation), ScriptedGenerator([])), max_new_tokens=64,
                            force_first_tool=True)
        result = loop.run(conversation, QUERY)

    assert result.answer == "The latest value of key_1 is value_10."
    assert [t.name for t in result.trace] == ["search_context", "fold_fragment", MALFORMED]
    assert result.trace[0].error is None and "unknown fragment_id 'nope00'" in result.trace[1].error
    assert gen.prompt_tokens == 300 and gen.completion_tokens == 21

    first, second, third = (r["body"] for r in server.requests)
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert [t["function"]["name"] for t in first["tools"]] == [s["function"]["name"] for s in tool_schemas()]
    assert first["max_tokens"] == 64 and first["model"] == "stub-model"
    assert first["tool_choice"] == "required" and "tool_choice" not in second  # the paper's first-step setting
    assert "<tools>" not in first["messages"][0]["content"]
    # The earlier call goes back as structured tool_calls, each answered by its tool_call_id.
    assistant, *tool_msgs = second["messages"][-3:]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert assistant["content"] is None and [c["function"]["name"] for c in assistant["tool_calls"]] == [
        "search_context", "fold_fragment"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"query": "key_1"}
    assert [(m["role"], m["tool_call_id"]) for m in tool_msgs] == [("tool", ids[0]), ("tool", ids[1])]
    assert json.loads(tool_msgs[0]["content"])["total_matches"] == 4
    # The unreadable call answers no structured call, so its error comes back as a user message.
    assert third["messages"][-2] == {"role": "assistant", "content": "Checking.\n<tool_call>\n"
                                     '{"name": "search_context", "arguments": {"query": }\n</tool_call>'}
    assert third["messages"][-1]["role"] == "user" and "could not read your tool call" in third["messages"][-1]["content"]


def test_openai_messages_pairs_by_name_and_keeps_plain_turns():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me see. " + hermes("search_context", query="a")
             + hermes("fold_fragment", fragment_id="abc123")},
            {"role": "tool", "name": "search_context", "content": "r1"},
            {"role": "tool", "name": "fold_fragment", "content": "r2"},
            {"role": "assistant", "content": "plain answer"}]
    out = openai_messages(msgs)
    assert out[0] == msgs[0] and out[-1] == msgs[-1]
    assert out[1]["content"] == "Let me see."
    assert [m["tool_call_id"] for m in out[2:4]] == ["call_1_0", "call_1_1"]


def test_endpoint_generator_rejects_bad_client_and_bad_response():
    with pytest.raises(TypeError, match="OpenAICompatibleGenerator"):
        EndpointToolGenerator(object())
    with StubChatServer([{"unexpected": True}]) as server:
        gen = EndpointToolGenerator(OpenAICompatibleGenerator(server.url, "m", timeout=5))
        with pytest.raises(ValueError, match="unexpected chat-completion response"):
            gen.generate([{"role": "user", "content": "hi"}])
