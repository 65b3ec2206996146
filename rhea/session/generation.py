"""Answer a `ContextPlan` with a `RheaForCausalLM`: render, generate, decode, timed."""
from __future__ import annotations

import contextlib
import copy
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch

from rhea.context import ContextOverflowError, ContextPlan, render
from rhea.errors import RheaConfigError
from rhea.session.history_cache import (HistoryKVCache, cache_keyword, generate_reusing, reuse_allowed,
                                         weights_version)


@dataclass
class Generation:
    """A reply and what it cost: prompt tokens, latent slots, new tokens, seconds per phase.

    timings: ``render_s``, ``prefill_s`` (prompt → first new token, including building a
    prefix cache on a miss), ``decode_s`` (the rest), ``prefix_reused_tokens`` (prompt tokens
    whose keys/values came from a `PrefixKVCache`; 0 without one or on a miss).
    """

    text: str
    prompt_tokens: int
    latent_slots: int
    new_tokens: int
    timings: dict[str, float] = field(default_factory=dict)


DEFAULT_GENERATION = {"do_sample": False, "repetition_penalty": 1.15}


_weights_version = weights_version


class PrefixKVCache:
    """The keys/values of a prompt's instruction block (system message), kept across turns.

    While the block's tokens, the adapter, the model and its weights are unchanged, the next
    prompt that starts with the same block prefills only the tokens after it. The stored cache
    is never handed out: each turn gets a copy, which ``generate`` extends. Greedy output is
    the same with and without it (tested token-exact); `clear()` drops it.

    >>> cache = PrefixKVCache()
    >>> gen = generate_from_plan(model, plan, prefix_cache=cache)        # doctest: +SKIP
    >>> gen.timings["prefix_reused_tokens"], cache.hits, cache.misses     # doctest: +SKIP
    (0.0, 0, 1)
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._model: weakref.ref | None = None  # not id(model): a new model may reuse a freed id
        self._cache = None
        self.hits = 0
        self.misses = 0
        self.builds = 0

    def clear(self) -> None:
        """Forget the stored block (the next turn rebuilds it)."""
        self._key, self._model, self._cache = None, None, None

    def __len__(self) -> int:
        """Tokens currently stored (0 when empty)."""
        return 0 if self._key is None else len(self._key[-1])

    @staticmethod
    def usable(model, input_ids: torch.Tensor, prefix_len: int) -> bool:
        """Whether a prompt's block can be cached: one row, a non-empty block with at least one
        token after it, and no `<mem>` latent slot inside it (latents are not part of the key)."""
        return (
            input_ids.shape[0] == 1
            and 0 < prefix_len < input_ids.shape[1]
            and not bool((input_ids[0, :prefix_len] == model.mem_token_id).any())
        )

    def get(self, model, input_ids: torch.Tensor, prefix_len: int, adapter: str):
        """A fresh copy of the cached block for this prompt, built first on a miss.

        Returns ``(cache, reused_tokens)``: ``reused_tokens`` is 0 on a miss (the block was just
        prefilled here, which costs the same as prefilling it inside ``generate``).
        """
        block = tuple(input_ids[0, :prefix_len].tolist())
        key = (_weights_version(model), adapter, model.dtype, str(model.device),
               float(getattr(model.config, "anchor_bias", 0.0)), block)
        reused = prefix_len
        same_model = self._model is not None and self._model() is model
        if key != self._key or not same_model:
            self.misses += 1
            reused = 0
            self.clear()
            ctx = model.disable_adapters() if adapter == "base" else contextlib.nullcontext()
            with torch.no_grad(), ctx:
                out = model(input_ids=input_ids[:, :prefix_len].to(model.device),
                            prefix_len=torch.tensor([prefix_len]), use_cache=True, logits_to_keep=1)
            kept = getattr(out, "cache", None)  # transformers 5.x; `past_key_values` before
            self._cache = kept if kept is not None else out.past_key_values
            self._key, self._model = key, weakref.ref(model)
            self.builds += 1
        else:
            self.hits += 1
        return copy.deepcopy(self._cache), reused


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
        """Flush text held back for an unfinished multi-byte character, so the stream equals the reply."""
        if self.on_text is not None and self.ids:
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            if text != self.emitted:
                self.on_text(text[len(self.emitted):])
                self.emitted = text


def _overflow_advice(plan: ContextPlan, tokenizer, n_prompt: int, max_new_tokens: int, limit: int) -> str:
    """What overflowed the context and the one fix that applies: the message itself, or the history."""
    head = (f"the plan renders to {n_prompt} tokens; with max_new_tokens={max_new_tokens} that exceeds the model's "
            f"context of {limit}")
    query = next((m["content"] for m in reversed(plan.messages) if m["role"] == "user"), "")
    query_tokens = len(tokenizer(query, add_special_tokens=False)["input_ids"]) if isinstance(query, str) else 0
    kept = [d for d in plan.decisions.turns if d.tier != "drop"]
    if not kept or query_tokens + max_new_tokens >= limit:
        # no history in the prompt: switching policy cannot help
        overhead = n_prompt - query_tokens  # the chat template's tokens (and any system text) around the message
        room = limit - max_new_tokens - overhead
        if room < 1:  # even an empty message would not fit: max_new_tokens is the problem
            return (f"{head}: max_new_tokens={max_new_tokens} and the {overhead} tokens around the message leave no "
                    f"room for it. Lower max_new_tokens to at most {max(limit - overhead - query_tokens, 0)} for this "
                    f"message, or under {limit - overhead} in any case.")
        return (f"{head}, and no past turn is in it: the message itself is {query_tokens} tokens. Split the message "
                f"into parts of at most {room} tokens each (or lower max_new_tokens).")
    if len(kept) == len(plan.decisions.turns) and all(d.tier == "raw" for d in kept):
        # the policy kept the whole history as text: only one that drops or compresses turns helps
        return (f"{head}; {len(kept)} past turns are in it. Use a policy that drops or compresses history "
                "(e.g. 'rhea' or 'recent-k'), or lower max_new_tokens.")
    return (f"{head}; policy {plan.policy!r} kept {len(kept)} past turns in it. Lower max_new_tokens, or make the "
            "policy keep less (e.g. a higher tau_low/tau_high for 'rhea', a smaller k for 'recent-k').")


def generate_from_plan(
    model,
    plan: ContextPlan,
    *,
    max_new_tokens: int = 128,
    adapter: str = "generate",
    on_text: Callable[[str], None] | None = None,
    prefix_cache: PrefixKVCache | HistoryKVCache | None = None,
    **generate_kwargs,
) -> Generation:
    """Render `plan` (latents as `<mem>` placeholders) and generate the assistant's reply.

    adapter: ``"generate"`` (the generate LoRA) or ``"base"`` (adapters disabled: the plain
    model, for text-only baselines). `on_text` receives the reply incrementally (streaming).
    `prefix_cache`: a `PrefixKVCache` holding the instruction block's keys/values across calls,
    or a `HistoryKVCache` holding the last prompt and reply (the next call prefills only what
    follows their common prefix); ignored when ``use_cache=False`` or a cache (``cache`` /
    ``past_key_values``) is passed in `generate_kwargs` (and the history cache with beams or
    several return sequences).

    >>> gen = generate_from_plan(model, plan, max_new_tokens=32)   # doctest: +SKIP
    >>> gen.text, gen.timings["prefill_s"]                          # doctest: +SKIP
    """
    if adapter not in ("generate", "base"):
        raise RheaConfigError(f"adapter={adapter!r} must be 'generate' or 'base'")
    t0 = time.perf_counter()
    rendered = render(plan, model.tokenizer)
    t_render = time.perf_counter() - t0
    n_prompt = int(rendered.input_ids.shape[1])
    limit = model.max_context
    if limit is not None and n_prompt + max_new_tokens > limit:
        raise ContextOverflowError(_overflow_advice(plan, model.tokenizer, n_prompt, max_new_tokens, limit))
    if adapter == "base" and rendered.latent_embeds is not None:
        raise RheaConfigError("a plan with latents needs the generate adapter; adapter='base' is for text-only plans")
    kwargs = {**DEFAULT_GENERATION, **generate_kwargs}
    device = model.device
    latents = rendered.latent_embeds.to(device) if rendered.latent_embeds is not None else None
    streamer = _TimingStreamer(model.tokenizer, on_text)
    ctx = model.disable_adapters() if adapter == "base" else contextlib.nullcontext()
    t1 = time.perf_counter()
    reused = 0
    free = kwargs.get("use_cache", True) and "past_key_values" not in kwargs and "cache" not in kwargs
    if isinstance(prefix_cache, HistoryKVCache) and reuse_allowed(kwargs):
        def run(ids, lat, mask, prefix, past):
            return model.generate(ids, latent_embeds=lat, attention_mask=mask, prefix_len=prefix,
                                  **{cache_keyword(model): past}, max_new_tokens=max_new_tokens, streamer=streamer, **kwargs)
        with ctx:
            out, _, (reused,) = generate_reusing(model, [rendered], [prefix_cache], adapter=adapter, generate=run)
    else:
        if (isinstance(prefix_cache, PrefixKVCache) and free
                and PrefixKVCache.usable(model, rendered.input_ids, rendered.prefix_len)):
            kwargs[cache_keyword(model)], reused = prefix_cache.get(model, rendered.input_ids, rendered.prefix_len,
                                                                 adapter)
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
        timings={"render_s": t_render, "prefill_s": first - t1, "decode_s": t_end - first,
                 "prefix_reused_tokens": float(reused)},
    )
