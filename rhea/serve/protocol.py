"""The OpenAI chat-completions request, checked, and the conversation it carries.

The server is stateless: every request holds the whole message list, and
`conversation_from_messages` turns it into what a `ChatSession` would hold after those turns
(system messages, the past user/assistant turns, the new query). Any mistake is an `APIError`
that names the field, so the client gets OpenAI's 400 body and never a traceback.

>>> req = parse_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', "m")
>>> req.query, req.max_tokens, req.temperature, req.stream, req.rhea
('hi', None, 0.0, False, False)
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from rhea.context import Conversation, Turn
from rhea.serve.errors import APIError, ModelNotFoundError

SYSTEM_ROLES = ("system", "developer")
#: Characters in one message above which the request is refused (ChatSession's own limit).
MAX_MESSAGE_CHARS = 200_000


@dataclass
class ChatRequest:
    """One checked request: the conversation, the query and how to answer it."""

    model: str
    system: list[str]
    conversation: Conversation
    query: str
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    rhea: bool = False
    trace: bool = False
    seed: int | None = None
    #: oldest past turns the server dropped to bound its work (``--max-compressions``); 0 when none
    trimmed: int = 0

    @property
    def size(self) -> int:
        """Characters in every message: how much work the request is, for fair scheduling."""
        return (sum(map(len, self.system)) + len(self.query)
                + sum(len(t.user) + len(t.assistant) for t in self.conversation))

    def generation_key(self, default_max_tokens: int) -> tuple:
        """Requests with equal keys can share one generation batch."""
        return (self.max_tokens or default_max_tokens, self.temperature, self.top_p, self.seed)


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(message, param=param, code=code)


def _text_content(content: object, where: str, *, allow_empty: bool = False) -> str:
    """A message's text: a str, or a list of ``{"type": "text", "text": ...}`` parts (joined).
    An assistant reply may be empty (a model can answer nothing, as `Turn` allows); other messages may not."""
    if content is None and allow_empty:
        content = ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _bad(f"{where}.content[{j}] is a {kind!r} part; this server takes text only "
                           '({"type": "text", "text": "..."})', f"{where}.content")
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise _bad(f"{where}.content must be a string or a list of text parts, got "
                   f"{'null' if content is None else type(content).__name__}", f"{where}.content")
    if not text.strip() and not allow_empty:
        raise _bad(f"{where}.content is empty; every message needs text", f"{where}.content", "empty_message")
    if len(text) > MAX_MESSAGE_CHARS:
        raise _bad(f"{where}.content has {len(text):,} characters (limit {MAX_MESSAGE_CHARS:,}); split it",
                   f"{where}.content", "context_length_exceeded")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(f"{where}.content holds an unpaired surrogate; send valid UTF-8 text", f"{where}.content") from None
    return text


def conversation_from_messages(messages: object) -> tuple[list[str], Conversation, str]:
    """``(system texts, past turns, query)`` from an OpenAI message list.

    System (and "developer") messages come first; then user and assistant messages alternate,
    starting and ending with a user message: each user/assistant pair is one past turn, the
    last user message is the query.

    >>> system, conv, query = conversation_from_messages([
    ...     {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
    ...     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now?"}])
    >>> system, [(t.user, t.assistant) for t in conv], query
    (['Be brief.'], [('hi', 'hello')], 'and now?')
    """
    if not isinstance(messages, list):
        raise _bad(f"messages must be a list of message objects, got {type(messages).__name__}", "messages")
    if not messages:
        raise _bad("messages is empty; send at least one user message", "messages", "empty_messages")
    system: list[str] = []
    pending_user: str | None = None
    conversation = Conversation()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(f"{where} must be an object with role and content", where)
        role = message.get("role")
        if role in SYSTEM_ROLES:
            if pending_user is not None or len(conversation):
                raise _bad(f"{where} is a {role} message after the conversation started; put system messages "
                           "first", f"{where}.role")
            system.append(_text_content(message.get("content"), where))
        elif role == "user":
            if pending_user is not None:
                raise _bad(f"{where} is a user message right after another user message; user and assistant "
                           "messages must alternate (merge the two, or add the assistant reply between them)",
                           f"{where}.role")
            pending_user = _text_content(message.get("content"), where)
        elif role == "assistant":
            if pending_user is None:
                raise _bad(f"{where} is an assistant message with no user message before it; user and assistant "
                           "messages must alternate, starting with a user message", f"{where}.role")
            if message.get("tool_calls"):
                raise _bad(f"{where} has tool_calls; this server does not run tools", f"{where}.tool_calls")
            conversation.append(Turn(pending_user, _text_content(message.get("content"), where, allow_empty=True)))
            pending_user = None
        elif role in ("tool", "function"):
            raise _bad(f"{where} has role {role!r}; this server does not run tools", f"{where}.role")
        else:
            raise _bad(f"{where}.role={role!r} must be one of 'system', 'developer', 'user', 'assistant'",
                       f"{where}.role")
    if pending_user is None:
        raise _bad("the last message must be a user message (the one to answer)", "messages", "last_message_not_user")
    return system, conversation, pending_user


def _number(body: dict, name: str, lo: float, hi: float, default, *, above: bool = False):
    """A number in [lo, hi] (in (lo, hi] when `above`), or `default` when absent."""
    value = body.get(name)
    if value is None:
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not lo <= value <= hi or (above and value == lo)):
        raise _bad(f"{name}={value!r} must be a number {'above' if above else 'from'} {lo} {'up ' if above else ''}to "
                   f"{hi}", name)
    return float(value)


def _positive_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(f"{name}={value!r} must be an integer >= 1", name)
    return value


def parse_request(raw: bytes, served_model: str) -> ChatRequest:
    """Check a chat-completions request body (bytes of JSON) and return the `ChatRequest`."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(f"the request body is not valid JSON ({e}); send a JSON object", None, "invalid_json") from None
    except RecursionError:
        raise _bad("the request body nests arrays or objects too deeply to read; send the messages as a flat "
                   "list of {role, content} objects", None, "invalid_json") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts (int_max_str_digits)
        raise _bad(f"the request body holds a value that cannot be read ({e}); send numbers of ordinary size",
                   None, "invalid_json") from None
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}", None, "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required: the served model's id (GET /v1/models)", "model")
    if model != served_model:
        raise ModelNotFoundError(model, served_model)
    system, conversation, query = conversation_from_messages(body.get("messages"))
    n = body.get("n", 1)
    if n is None:
        n = 1
    if n != 1 or type(n) is not int:
        raise _bad(f"n={n!r}: this server returns one choice per request (n=1)", "n")
    for name in ("tools", "functions", "response_format", "logprobs"):
        if body.get(name) not in (None, False, [], {"type": "text"}):
            raise _bad(f"{name} is not supported by this server", name, "unsupported_parameter")
    max_tokens = _positive_int(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _positive_int(body, "max_tokens")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise _bad(f"stop={body.get('stop')!r} must be a non-empty string or a list of up to 4 of them", "stop")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad(f"stream={stream!r} must be true or false", "stream")
    options = body.get("stream_options")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise _bad("stream_options must be an object", "stream_options")
    ext = body.get("rhea", False)
    if isinstance(ext, dict):
        rhea, trace = True, bool(ext.get("trace", False))
    elif isinstance(ext, bool):
        rhea, trace = ext, False
    else:
        raise _bad(f'rhea={ext!r} must be true, false or {{"trace": true}}', "rhea")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2 ** 63 <= seed < 2 ** 64):
        raise _bad(f"seed={seed!r} must be an integer from -2**63 to 2**64 - 1", "seed")
    return ChatRequest(model=model, system=system, conversation=conversation, query=query, max_tokens=max_tokens,
                       temperature=_number(body, "temperature", 0.0, 2.0, 0.0), top_p=_number(body, "top_p", 0.0, 1.0, 1.0, above=True),
                       stop=stop, stream=stream, include_usage=bool(options.get("include_usage", False)),
                       rhea=rhea, trace=trace, seed=seed)


__all__ = ["ChatRequest", "conversation_from_messages", "parse_request"]
