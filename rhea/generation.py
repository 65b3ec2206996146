"""Answer a `ContextPlan` with a `RheaForCausalLM`: render, generate, decode, timed."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from rhea.context import ContextOverflowError, ContextPlan, render


@dataclass
class Generation:
    """A reply and what it cost: prompt tokens, latent slots, new tokens, seconds per phase.

    timings: ``render_s``, ``prefill_s`` (prompt → first new token), ``decode_s`` (the rest).
    """

    text: str
    prompt_tokens: int
    latent_slots: int
    new_tokens: int
    timings: dict[str, float] = field(default_factory=dict)


DEFAULT_GENERATION = {"do_sample": False, "repetition_penalty": 1.15}


class _TimingStreamer:
    """A transformers streamer that timestamps the first new token and forwards decoded text."""

    def __init__(self, tokenizer, on_text: Callable[[str], None] | None):
        self.tokenizer, self.on_text = tokenizer, on_text
        self.calls = 0
        self.first_token_at: float | None = None
        self.ids: list[int] = []
        self.emitted = ""

    def put(self, value: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 1:  # generate() first hands over the prompt
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.ids.extend(value.reshape(-1).tolist())
        if self.on_text is not None:
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                self.on_text(text[len(self.emitted):])
                self.emitted = text

    def end(self) -> None:
        pass


def generate_from_plan(
    model,
    plan: ContextPlan,
    *,
    max_new_tokens: int = 128,
    adapter: str = "generate",
    on_text: Callable[[str], None] | None = None,
    **generate_kwargs,
) -> Generation:
    """Render `plan` (latents as `<mem>` placeholders) and generate the assistant's reply.

    adapter: ``"generate"`` (the generate LoRA) or ``"base"`` (adapters disabled: the plain
    model, for text-only baselines). `on_text` receives the reply incrementally (streaming).

    >>> gen = generate_from_plan(model, plan, max_new_tokens=32)   # doctest: +SKIP
    >>> gen.text, gen.timings["prefill_s"]                          # doctest: +SKIP
    """
    if adapter not in ("generate", "base"):
        raise ValueError(f"adapter={adapter!r} must be 'generate' or 'base'")
    t0 = time.perf_counter()
    rendered = render(plan, model.tokenizer)
    t_render = time.perf_counter() - t0
    n_prompt = int(rendered.input_ids.shape[1])
    limit = model.max_context
    if limit is not None and n_prompt + max_new_tokens > limit:
        raise ContextOverflowError(
            f"the plan renders to {n_prompt} tokens; with max_new_tokens={max_new_tokens} that exceeds the model's "
            f"context of {limit}. Use a policy that drops or compresses history (e.g. 'rhea' or 'recent-k'), or lower max_new_tokens."
        )
    if adapter == "base" and rendered.latent_embeds is not None:
        raise ValueError("a plan with latents needs the generate adapter; adapter='base' is for text-only plans")
    kwargs = {**DEFAULT_GENERATION, **generate_kwargs}
    device = model.device
    latents = rendered.latent_embeds.to(device) if rendered.latent_embeds is not None else None
    streamer = _TimingStreamer(model.tokenizer, on_text)
    ctx = model.disable_adapters() if adapter == "base" else contextlib.nullcontext()
    t1 = time.perf_counter()
    with ctx:
        out = model.generate(
            rendered.input_ids.to(device),
            latent_embeds=latents,
            prefix_len=torch.tensor([rendered.prefix_len]),
            max_new_tokens=max_new_tokens,
            streamer=streamer,
            **kwargs,
        )
    t_end = time.perf_counter()
    new = out[0, n_prompt:]
    first = streamer.first_token_at or t_end
    return Generation(
        text=model.tokenizer.decode(new, skip_special_tokens=True).strip(),
        prompt_tokens=n_prompt,
        latent_slots=0 if latents is None else int(latents.shape[0]),
        new_tokens=int(new.shape[0]),
        timings={"render_s": t_render, "prefill_s": first - t1, "decode_s": t_end - first},
    )
