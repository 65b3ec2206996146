"""Strict readers of LLM decisions and summaries; a bad reply raises `DecisionParseError`
naming what was wrong, so the caller can fall back and record why."""
from __future__ import annotations

import json
import re

from rhea.agents.context_agent.errors import DecisionParseError

ACTIONS = ("CONTINUE", "CREATE_BRANCH", "SWITCH_BRANCH")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def first_json_object(text: str) -> dict:
    """The first balanced `{...}` in `text` (code fences allowed), read with plain `json.loads`.

    >>> first_json_object('Sure: ```json\\n{"topic": 2}\\n```')
    {'topic': 2}
    """
    if not isinstance(text, str) or "{" not in text:
        raise DecisionParseError(f"reply {str(text)[:120]!r} holds no JSON object")
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced and "{" in fenced.group(1) else text
    start = body.index("{")
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(body)):
        ch = body[i]
        if in_string:
            escaped = ch == "\\" and not escaped
            if ch == '"' and not escaped:
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                try:
                    value = json.loads(body[start:i + 1])
                except ValueError as exc:
                    raise DecisionParseError(f"reply JSON {body[start:i + 1][:120]!r} is invalid: {exc}") from exc
                return value
    raise DecisionParseError(f"reply {text[:120]!r} has an unterminated JSON object")


def parse_topic_choice(text: str, n_candidates: int) -> tuple[int, str]:
    """(topic number, reason); 0 means a new topic.

    >>> parse_topic_choice('{"topic": 1, "reason": "same trip"}', 2)
    (1, 'same trip')
    """
    obj = first_json_object(text)
    topic = obj.get("topic")
    if isinstance(topic, str) and topic.strip().isdigit():
        topic = int(topic.strip())
    if isinstance(topic, bool) or not isinstance(topic, int) or not 0 <= topic <= n_candidates:
        raise DecisionParseError(f"topic={obj.get('topic')!r} must be an int in 0..{n_candidates}")
    return topic, str(obj.get("reason", ""))


def parse_branch_decision(text: str) -> dict:
    """{"action", "reason"} plus, for the record only, any id the LLM wrote ("llm_fork_node_id",
    "llm_target_branch_id"): the navigator takes the ids from retrieval, as the reference does.

    >>> parse_branch_decision('{"action": "CREATE_BRANCH", "fork_node_id": "n2"}')
    {'action': 'CREATE_BRANCH', 'reason': '', 'llm_fork_node_id': 'n2'}
    """
    obj = first_json_object(text)
    action = str(obj.get("action", "")).strip().upper()
    if action not in ACTIONS:
        raise DecisionParseError(f"action={obj.get('action')!r} must be one of {ACTIONS}")
    out = {"action": action, "reason": str(obj.get("reason", ""))}
    for key in ("fork_node_id", "target_branch_id"):
        if obj.get(key) is not None:
            out[f"llm_{key}"] = str(obj[key])
    return out


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_yes_no(text: str) -> bool:
    """The first standalone yes/no of a reply (code fences and punctuation allowed).

    >>> parse_yes_no("```\\nYes\\n```"), parse_yes_no("no.")
    (True, False)
    """
    match = _YES_NO.search(text or "")
    if not match:
        raise DecisionParseError(f"reply {str(text)[:120]!r} says neither yes nor no")
    return match.group(1).lower() == "yes"


def parse_summary(text: str) -> str:
    """The first non-empty line, without a 'Summary:' label or quotes.

    >>> parse_summary('Summary: "User wants a 9000 yuan laptop."\\n')
    'User wants a 9000 yuan laptop.'
    """
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(summary(_for_llm)?|note)\s*:\s*", "", line.strip(), flags=re.IGNORECASE).strip().strip('"').strip()
        if line:
            return line
    raise DecisionParseError(f"summary reply {text!r} is empty")


def truncation_summary(user: str, assistant: str, *, user_words: int = 24, reply_words: int = 12) -> str:
    """The deterministic fallback summary: the head of the user message and of the reply.

    >>> truncation_summary("Plan a trip to Rome in May", "Sure, here is a plan for Rome")
    'User: Plan a trip to Rome in May | Assistant: Sure, here is a plan for Rome'
    """
    def head(text: str, n: int) -> str:
        words = text.split()
        return " ".join(words[:n]) + (" …" if len(words) > n else "")

    reply = head(assistant, reply_words)
    return f"User: {head(user, user_words)}" + (f" | Assistant: {reply}" if reply else "")
