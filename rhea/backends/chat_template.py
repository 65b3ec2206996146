"""The chat template used when a tokenizer has none (rendering and the text generators share it)."""
from __future__ import annotations

#: ChatML, the format of SmolLM2 and Qwen2.5. Its markers are plain text (split into ordinary
#: tokens) unless the tokenizer has them.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def chat_template(tokenizer) -> str | None:
    """The template to pass to ``apply_chat_template``: None (the tokenizer's own) or the fallback.

    >>> class Plain: chat_template = None
    >>> chat_template(Plain()) is FALLBACK_CHAT_TEMPLATE
    True
    """
    return None if getattr(tokenizer, "chat_template", None) else FALLBACK_CHAT_TEMPLATE


def apply_chat_template(tokenizer, messages, *, add_generation_prompt: bool = True) -> str:
    """`messages` as the prompt text the tokenizer's template (or the fallback) writes."""
    return tokenizer.apply_chat_template(
        messages, chat_template=chat_template(tokenizer), tokenize=False, add_generation_prompt=add_generation_prompt
    )
