"""Answer a `ContextPlan` with a `RheaForCausalLM`: render, generate, decode, timed."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rhea.context import ContextPlan, render


@dataclass
class Generation:
    """A reply and what it cost: prompt tokens, latent slots, new tokens, seconds per phase."""

    text: str
    prompt_tokens: int
    latent_slots: int
    new_tokens: int
    timings: dict[str, float] = field(default_factory=dict)


DEFAULT_GENERATION = {"do_sample": False, "repetition_penalty": 1.15}


def generate_from_plan(model, plan: ContextPlan, *, max_new_tokens: int = 128, **generate_kwargs) -> Generation:
    """Render `plan` (latents as `<mem>` placeholders) and generate the assistant's reply.

    >>> gen = generate_from_plan(model, plan, max_new_tokens=32)   # doctest: +SKIP
    >>> gen.text, gen.timings["prefill_decode_s"]                   # doctest: +SKIP
    """
    t0 = time.perf_counter()
    rendered = render(plan, model.tokenizer)
    t_render = time.perf_counter() - t0
    limit = model.max_context
    if limit is not None and rendered.input_ids.shape[1] + max_new_tokens > limit:
        from rhea.context import ContextOverflowError

        raise ContextOverflowError(
            f"the plan renders to {rendered.input_ids.shape[1]} tokens; with max_new_tokens={max_new_tokens} that "
            f"exceeds the model's context of {limit}. Use a policy that drops or compresses history "
            "(e.g. 'rhea' or 'recent-k'), or lower max_new_tokens."
        )
    kwargs = {**DEFAULT_GENERATION, **generate_kwargs}
    device = model.device
    latents = rendered.latent_embeds.to(device) if rendered.latent_embeds is not None else None
    t1 = time.perf_counter()
    out = model.generate(
        rendered.input_ids.to(device),
        latent_embeds=latents,
        prefix_len=torch.tensor([rendered.prefix_len]),
        max_new_tokens=max_new_tokens,
        **kwargs,
    )
    t_gen = time.perf_counter() - t1
    new = out[0, rendered.input_ids.shape[1]:]
    text = model.tokenizer.decode(new, skip_special_tokens=True).strip()
    return Generation(
        text=text,
        prompt_tokens=int(rendered.input_ids.shape[1]),
        latent_slots=0 if latents is None else int(latents.shape[0]),
        new_tokens=int(new.shape[0]),
        timings={"render_s": t_render, "prefill_decode_s": t_gen},
    )
