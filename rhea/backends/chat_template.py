"""The chat template used when a tokenizer has none (rendering and the text generators share it), and
the one way message text reaches a template: with the tokenizer's control tokens kept as text.

A chat template writes its own control tokens (ChatML's ``<|im_start|>`` / ``<|im_end|>``) around
each message; the prompt is then tokenized as one string, so the same strings typed inside a
message would become the same special tokens and forge turn boundaries or roles.
`escape_control_tokens` breaks every such string inside message content with a word joiner
(U+2060): it reads the same, but no longer matches a token. `apply_chat_template` applies it to
every message, so every prompt rendered through it (`rhea.context.render`, the text generators,
the agents' controllers) holds exactly the control tokens the template wrote.
"""
from __future__ import annotations

from rhea.constants import MEM_TOKEN

#: ChatML, the format of SmolLM2 and Qwen2.5. Its markers are plain text (split into ordinary
#: tokens) unless the tokenizer has them.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: inserted after the first character of a control token found in message text (U+2060 WORD JOINER)
JOINER = "\u2060"


def chat_template(tokenizer) -> str | None:
    """The template to pass to ``apply_chat_template``: None (the tokenizer's own) or the fallback.

    >>> class Plain: chat_template = None
    >>> chat_template(Plain()) is FALLBACK_CHAT_TEMPLATE
    True
    """
    return None if getattr(tokenizer, "chat_template", None) else FALLBACK_CHAT_TEMPLATE


def control_tokens(tokenizer) -> tuple[str, ...]:
    """The strings `tokenizer` turns into its special tokens whatever surrounds them (role and turn markers,
    BOS/EOS, padding), longest first, except ``<mem>``, whose literal text `rhea.context.render` handles itself.

    >>> from rhea.testing import tiny_tokenizer
    >>> sorted(control_tokens(tiny_tokenizer()))
    ['<eos>', '<pad>', '<unk>', '<|im_end|>', '<|im_start|>']
    """
    found = set()
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", True):  # non-special added tokens (e.g. Qwen's <tool_call>) stay usable
            found.add(str(getattr(token, "content", token)))
    found.update(str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or ()))
    found.discard(MEM_TOKEN)
    return tuple(sorted((t for t in found if len(t) >= 2), key=lambda t: (-len(t), t)))


def escape_control_tokens(text: str, tokens) -> str:
    """`text` with each of `tokens` broken by `JOINER` after its first character, so it stays text.

    >>> escape_control_tokens("hi<|im_end|>", ["<|im_end|>"]) == "hi<" + JOINER + "|im_end|>"
    True
    """
    for _ in range(4):  # breaking one token cannot form another, but a token may hide inside a longer one
        hit = False
        for token in tokens:
            if token in text:
                text, hit = text.replace(token, token[0] + JOINER + token[1:]), True
        if not hit:
            break
    return text


def escape_messages(tokenizer, messages) -> list[dict]:
    """`messages` with the control tokens of `tokenizer` in their (string) content kept as text."""
    tokens = control_tokens(tokenizer)
    out = []
    for m in messages:
        content = m.get("content")
        out.append({**m, "content": escape_control_tokens(content, tokens)} if isinstance(content, str) and tokens else m)
    return out


def apply_chat_template(tokenizer, messages, *, add_generation_prompt: bool = True, **kwargs) -> str:
    """`messages` as the prompt text the tokenizer's template (or the fallback) writes, control tokens
    typed inside a message kept as text (`escape_messages`)."""
    return tokenizer.apply_chat_template(
        escape_messages(tokenizer, messages), chat_template=chat_template(tokenizer), tokenize=False,
        add_generation_prompt=add_generation_prompt, **kwargs)
