"""Shared pieces of the ACR tests: a tiny controller and a rule-based solver (no downloads)."""
from __future__ import annotations

import re

from rhea.agents.acr import ACRController
from rhea.testing import tiny_llama, tiny_tokenizer

_FACT = re.compile(r"\bthe ([a-z]+) is (?:actually |now )?([a-z]+)", re.IGNORECASE)


def tiny_controller(**kwargs) -> ACRController:
    tok = tiny_tokenizer()
    return ACRController(tiny_llama(len(tok), max_positions=4096), tok, lora_r=4, lora_alpha=8, **kwargs)  # TGSE prompts run past 512


class FirstFactSolver:
    """Answers the question's key with the *first* value it sees stated for it (system block
    first, then the user turns): right on a clean or refactored history, wrong on a raw one
    whose fact was corrected later — the failure mode ACR exists to fix."""

    def __init__(self):
        self.calls = []

    def generate(self, messages, *, max_new_tokens=16, temperature=0.0, stop=None) -> str:
        self.calls.append(messages)
        key = re.search(r"What is the (\w+)\?", messages[-1]["content"])
        for m in messages[:-1]:
            for k, v in _FACT.findall(m["content"]):
                if key and k.lower() == key.group(1).lower() and m["role"] in ("system", "user"):
                    return v
        return "unknown"
