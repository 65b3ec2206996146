"""Constrained voting for local models too small to follow "reply with one word".

Observed on SmolLM2-135M-Instruct: with the decision prompt it writes prose ("The milk is
found ..."), so every free-form vote abstains. Here each agent's vote is instead sampled
from the model's own distribution over the two labels: p(a) ∝ exp(log p(a | prompt) / T),
with log p(a | prompt) the summed log-probability of the label's tokens after the
assistant header. The prompt is the same for all agents in a round, so it is scored once
and the k votes are k samples (agents differ through the temperature).
"""
from __future__ import annotations

import math
import random

from rhea.agents.ace.votes import ACTIONS, Vote


def label_logprobs(generator, messages: list[dict], labels=ACTIONS) -> tuple[dict, int, int]:
    """({label: log p(label | messages)}, prompt tokens, label tokens) for an `HFGenerator`."""
    from rhea.backends.chat_template import apply_chat_template  # the generator's own rendering, as generate() uses

    prompt = apply_chat_template(generator.tokenizer, [{"role": m["role"], "content": m["content"]} for m in messages])
    scores, read = generator.continuation_logprobs(prompt, list(labels))
    prompt_tokens = len(generator.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    return dict(zip(labels, scores)), prompt_tokens, read - prompt_tokens


def sample_votes(logprobs: dict, n: int, temperature: float, rng: random.Random) -> list[Vote]:
    """`n` votes drawn from softmax(logprobs / temperature); temperature 0 takes the argmax.

    >>> votes = sample_votes({"RETRIEVE": -1.0, "THINK": -5.0}, 3, 0.0, random.Random(0))
    >>> [v.choice for v in votes]
    ['RETRIEVE', 'RETRIEVE', 'RETRIEVE']
    """
    labels = list(logprobs)
    desc = " ".join(f"{k}={v:.2f}" for k, v in logprobs.items())
    if temperature == 0:
        best = max(labels, key=lambda k: (logprobs[k], -labels.index(k)))
        return [Vote(f"logp {desc}", best, "constrained argmax") for _ in range(n)]
    top = max(logprobs.values())
    weights = [math.exp((logprobs[k] - top) / temperature) for k in labels]
    return [Vote(f"logp {desc}", rng.choices(labels, weights)[0], "constrained sample") for _ in range(n)]
