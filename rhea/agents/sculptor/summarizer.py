"""Focused summaries of fragments, written by any `TextGenerator`."""
from __future__ import annotations

from rhea.backends.llm import TextGenerator
from rhea.context.budget import fit_inner

SUMMARY_SYSTEM_PROMPT = (
    "You condense text for another assistant's working memory. Keep every fact, name, number "
    "and value that matters for the stated focus, and the most recent value where things were "
    "updated. Drop everything else. Reply with the summary only."
)


def summary_messages(text: str, focus: str) -> list[dict]:
    """The chat messages that ask for a summary of `text` focused on `focus`.

    >>> summary_messages("a=1, a=2", "latest value of a")[1]["content"].splitlines()[0]
    'Focus: latest value of a'
    """
    return [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": f"Focus: {focus}\n\nText:\n{text}"},
    ]


def summarize_text(generator: TextGenerator, text: str, focus: str, *, max_new_tokens: int = 256,
                   record: list | None = None) -> str:
    """Ask `generator` for a greedy, focused summary of `text`. The prompt is fitted to the generator's
    window (`rhea.context.budget.fit_inner`: the middle of an over-long text is cut); a cut appends its
    ``inner_budget`` record to `record`.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> summarize_text(ScriptedGenerator(["  a is 2  "]), "a=1, a=2", "latest a")
    'a is 2'
    """
    messages = fit_inner(generator, summary_messages(text, focus), max_new_tokens, call="sculptor.summary", record=record)
    return generator.generate(messages, max_new_tokens=max_new_tokens, temperature=0.0).strip()
