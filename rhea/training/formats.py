"""Read multi-turn conversations from the common chat-data formats into `Conversation`s.

Supported, one JSON object per line (or a `datasets` dataset saved with ``save_to_disk``):

* OpenAI: ``{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}``
* ShareGPT: ``{"conversations": [{"from": "system"|"human"|"gpt", "value": str}, ...]}``
* UltraChat: ``{"data": [user, assistant, user, assistant, ...]}``

>>> rec = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
>>> system, conv = record_to_conversation(rec, where="line 1")
>>> conv[0].assistant
'hello'
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

from rhea.context import Conversation, Turn
from rhea.training.errors import TrainingDataError

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}


def _messages_of(record: dict, where: str) -> list[dict]:
    """Normalise a record of any supported format to ``[{"role", "content"}]``."""
    if "messages" in record:
        raw = record["messages"]
        if not isinstance(raw, list):
            raise TrainingDataError(f"{where}: 'messages' must be a list of {{role, content}} dicts")
        out = []
        for i, m in enumerate(raw):
            if not isinstance(m, dict) or "role" not in m or not isinstance(m.get("content"), str):
                raise TrainingDataError(f"{where}: messages[{i}]={m!r} needs 'role' and a str 'content'")
            out.append({"role": m["role"], "content": m["content"]})
        return out
    if "conversations" in record:
        out = []
        for i, m in enumerate(record["conversations"]):
            if not isinstance(m, dict) or "from" not in m or not isinstance(m.get("value"), str):
                raise TrainingDataError(f"{where}: conversations[{i}]={m!r} needs 'from' and a str 'value' (ShareGPT)")
            role = _SHAREGPT_ROLES.get(str(m["from"]).lower())
            if role is None:
                raise TrainingDataError(f"{where}: conversations[{i}] has from={m['from']!r}; expected one of {sorted(_SHAREGPT_ROLES)}")
            out.append({"role": role, "content": m["value"]})
        return out
    if "data" in record:
        data = record["data"]
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise TrainingDataError(f"{where}: 'data' must be a list of strings alternating user/assistant (UltraChat)")
        return [{"role": "user" if i % 2 == 0 else "assistant", "content": x} for i, x in enumerate(data)]
    raise TrainingDataError(
        f"{where}: record has keys {sorted(record)}; expected 'messages' (OpenAI), 'conversations' (ShareGPT) or 'data' (UltraChat)"
    )


def record_to_conversation(record: dict, *, where: str) -> tuple[str, Conversation]:
    """(system text or "", Conversation) for one record; user/assistant must alternate."""
    if not isinstance(record, dict):
        raise TrainingDataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    messages = _messages_of(record, where)
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    chat = [m for m in messages if m["role"] != "system"]
    turns = []
    for i in range(0, len(chat) - 1, 2):
        user, reply = chat[i], chat[i + 1]
        if user["role"] != "user" or reply["role"] != "assistant":
            raise TrainingDataError(
                f"{where}: message {i} is {user['role']!r} then {reply['role']!r}; turns must alternate user, assistant"
            )
        if not user["content"].strip():
            raise TrainingDataError(f"{where}: user message {i} is empty")
        turns.append(Turn(user["content"], reply["content"]))
    return system, Conversation(turns)


def _iter_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                from rhea.storage import not_utf8

                raise TrainingDataError(not_utf8(where, e)) from None
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                raise TrainingDataError(f"{where} is not valid JSON ({e})") from e
            except RecursionError:
                raise TrainingDataError(f"{where} nests JSON too deeply to read; write one flat record per line") from None
            except ValueError as e:  # an integer of more digits than Python converts
                raise TrainingDataError(f"{where} holds a value that cannot be read ({e})") from None


def iter_records(path: str | os.PathLike) -> Iterator[tuple[str, dict]]:
    """(location, record) pairs from a JSONL file or a `datasets` directory saved to disk."""
    path = Path(path)
    if path.is_file():
        yield from _iter_jsonl(path)
        return
    if path.is_dir():
        try:
            import datasets
        except ImportError as e:
            raise TrainingDataError(
                f"{path} is a directory, read as a `datasets` dataset saved to disk, but `datasets` is not installed; "
                "pip install datasets, or export the data to JSONL"
            ) from e
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise TrainingDataError(f"{path} holds splits {list(ds)}; save the 'train' split or pass its folder")
            ds = ds["train"]
        for i, rec in enumerate(ds):
            yield f"{path}[{i}]", rec
        return
    raise TrainingDataError(f"training data {path} does not exist; pass a .jsonl file or a datasets directory")


def load_conversations(path: str | os.PathLike) -> list[tuple[str, Conversation]]:
    """Every record of `path` as (system, Conversation)."""
    return [record_to_conversation(rec, where=where) for where, rec in iter_records(path)]


def load_trajectories(path: str | os.PathLike) -> list[tuple[list[dict], list[bool]]]:
    """Sculptor trajectory instances ``{"messages", "loss_mask"}`` as (messages, loss_mask)."""
    out = []
    for where, rec in iter_records(path):
        if not isinstance(rec, dict) or "messages" not in rec or "loss_mask" not in rec:
            raise TrainingDataError(f"{where}: a trajectory line needs 'messages' and 'loss_mask' (rhea.agents.sculptor.write_jsonl)")
        messages = _messages_of(rec, where)
        mask = rec["loss_mask"]
        if not isinstance(mask, list) or len(mask) != len(messages) or not all(isinstance(b, bool) for b in mask):
            raise TrainingDataError(f"{where}: loss_mask must be a list of {len(messages)} booleans, one per message")
        if any(m and messages[i]["role"] != "assistant" for i, m in enumerate(mask)):
            raise TrainingDataError(f"{where}: loss_mask marks a non-assistant message; only assistant messages can carry loss")
        out.append((messages, mask))
    return out
