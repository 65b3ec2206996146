"""Constrained voting for local models too small to follow "reply with one word".

Observed on SmolLM2-135M-Instruct: with the decision prompt it writes prose ("The milk is
found ..."), so every free-form vote abstains. Here each agent's vote is instead sampled
from the model's own distribution over the two labels: p(a) ∝ exp(log p(a | prompt) / T),
with log p(a | prompt) the summed log-probability of the label's tokens after the
assistant header. The prompt is the same for all agents in a round, so it is scored once
and the k votes are k samples (agents differ through the temperature).
"""
from __future__ import annotations

import copy
import math
import random

from rhea.agents.ace.votes import ACTIONS, Vote


def label_logprobs(generator, messages: list[dict], labels=ACTIONS) -> tuple[dict, int, int]:
    """({label: log p(label | messages)}, prompt tokens, label tokens) for an `HFGenerator`."""
    import torch

    from rhea.backends.llm import _chat_ids  # the generator's own chat rendering, so scores match generation

    enc = _chat_ids(generator.tokenizer, messages)
    model = generator._backbone()
    device = next(model.parameters()).device
    out, label_tokens = {}, 0
    with generator._context(), torch.no_grad():
        prompt = model(input_ids=enc["input_ids"].to(device), use_cache=True)
        first = torch.log_softmax(prompt.logits[0, -1].float(), dim=-1)
        for label in labels:
            ids = generator.tokenizer(label, add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)
            label_tokens += ids.shape[1]
            score = float(first[ids[0, 0]])
            if ids.shape[1] > 1:  # continue from a copy of the prompt's cache: one prefill for all labels
                rest = model(input_ids=ids[:, :-1], past_key_values=copy.deepcopy(prompt.past_key_values), use_cache=True)
                logp = torch.log_softmax(rest.logits[0].float(), dim=-1)
                score += float(logp.gather(-1, ids[0, 1:, None]).sum())
            out[label] = score
    return out, int(enc["input_ids"].shape[1]), label_tokens


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
