"""Several sessions' turns answered as one batch: plan each row, generate together, finish each.

Decoding a batch of rows costs nearly the same as one row where decoding is memory-bound (a
CPU, a GPU at small batch), so K conversations of one policy advance for little more than the
price of one. Each row keeps its own plan, latents and instruction prefix: the plans are
rendered and left-padded into one batch (`rhea.context.render_batch`), the latents of all rows
are concatenated in row order, and each row's prefix length is counted in its padded row.

A row whose prompt would overflow the context is not generated; its error is returned in its
place, and the other rows go on. Rows the policy answered itself (Sculptor's loop) are not
generated either. Greedy replies can differ from one-by-one replies in the last bits (padding
changes the kernels' reduction order); the suites score them the same way.

>>> from rhea.testing import tiny_rhea
>>> from rhea.session import ChatSession
>>> model = tiny_rhea()
>>> chats = [ChatSession(model, policy="vanilla", max_new_tokens=2) for _ in range(3)]
>>> replies = send_batch(chats, ["hi", "hello there", "a longer first message"])
>>> len(replies), [len(c.conversation) for c in chats]
(3, [1, 1, 1])
"""
from __future__ import annotations

import contextlib
import time
from typing import Sequence

from rhea.context import ContextOverflowError, Turn, render, render_batch
from rhea.errors import RheaError
from rhea.session.generation import DEFAULT_GENERATION, Generation
from rhea.session.history_cache import HistoryKVCache, cache_keyword, generate_reusing, reuse_allowed


class BatchError(RheaError, ValueError):
    """Sessions that cannot be answered in one batch (different models or generation settings)."""


class _Clock:
    """A streamer that only notes when the first new tokens arrive (the prefill's end)."""

    def __init__(self) -> None:
        self.calls, self.first_token_at = 0, None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        """The streamer protocol's end of generation: nothing to note (the clock only marks the first token)."""


def generate_batch(model, plans: Sequence, *, max_new_tokens: int = 128, adapter: str = "generate",
                   caches: Sequence[HistoryKVCache | None] | None = None, **generate_kwargs) -> list[Generation]:
    """Answer every plan of `plans` in one left-padded batch (greedy by default).

    Each `Generation` carries the batch's prefill / decode seconds (shared by its rows) and
    ``batch_rows``. Raise `ContextOverflowError` if a plan does not fit; `send_batch` checks
    that per row first. `caches` (one `HistoryKVCache` or None per plan): each row prefills only
    what follows the common prefix with its conversation's last prompt and reply, and its cache
    then holds this prompt and reply (``prefix_reused_tokens`` per row).
    """
    if adapter not in ("generate", "base"):
        raise ValueError(f"adapter={adapter!r} must be 'generate' or 'base'")
    if not plans:
        return []
    tokenizer = model.tokenizer
    t0 = time.perf_counter()
    kwargs = {**DEFAULT_GENERATION, **generate_kwargs}
    reuse = caches is not None and any(c is not None for c in caches) and reuse_allowed(kwargs)
    if caches is not None and len(caches) != len(plans):
        raise ValueError(f"{len(plans)} plans but {len(caches)} caches; pass one cache (or None) per plan")
    if reuse:
        rows = [render(p, tokenizer) for p in plans]
        lengths = [int(r.input_ids.shape[1]) for r in rows]
        has_latents = any(r.latent_embeds is not None for r in rows)
        slot_counts = [int((r.input_ids == _mem_id(model)).sum()) for r in rows]
    else:
        batch = render_batch(list(plans), tokenizer)
        lengths = batch.attention_mask.sum(-1).tolist()
        has_latents = batch.latent_embeds is not None
        slot_counts = [int((batch.input_ids[row] == _mem_id(model)).sum()) for row in range(len(lengths))]
    t_render = time.perf_counter() - t0
    if adapter == "base" and has_latents:
        raise ValueError("plans with latents need the generate adapter; adapter='base' is for text-only plans")
    limit = model.max_context
    if limit is not None and max(lengths) + max_new_tokens > limit:
        raise ContextOverflowError(f"a plan renders to {max(lengths)} tokens; with max_new_tokens={max_new_tokens} "
                                   f"that exceeds the model's context of {limit}")
    device = model.device
    clock = _Clock()
    ctx = model.disable_adapters() if adapter == "base" else contextlib.nullcontext()
    t1 = time.perf_counter()
    reused = [0] * len(lengths)
    with ctx:
        if reuse:
            def run(ids, lat, mask, prefix, past):
                return model.generate(ids, latent_embeds=lat, attention_mask=mask, prefix_len=prefix,
                                      **{cache_keyword(model): past}, max_new_tokens=max_new_tokens, streamer=clock, **kwargs)
            out, width, reused = generate_reusing(model, rows, caches, adapter=adapter, generate=run)
        else:
            latents = batch.latent_embeds.to(device) if batch.latent_embeds is not None else None
            out = model.generate(batch.input_ids.to(device), latent_embeds=latents,
                                 attention_mask=batch.attention_mask.to(device), prefix_len=batch.prefix_len,
                                 max_new_tokens=max_new_tokens, streamer=clock, **kwargs)
            width = batch.input_ids.shape[1]
    t_end = time.perf_counter()
    first = clock.first_token_at or t_end
    stop = _stop_ids(model)
    gens = []
    for row, n_prompt in enumerate(lengths):
        new = out[row, width:].tolist()
        # generation stops a row at the model's eos (and pads it after): keep what one-by-one would
        cut = next((i for i, t in enumerate(new) if t in stop), None)
        kept = new if cut is None else new[:cut + 1]
        gens.append(Generation(
            text=tokenizer.decode(kept, skip_special_tokens=True).strip(), prompt_tokens=int(n_prompt),
            latent_slots=slot_counts[row] if has_latents else 0, new_tokens=len(new) if cut is None else cut + 1,
            timings={"render_s": t_render / len(lengths), "prefill_s": first - t1, "decode_s": t_end - first,
                     "prefix_reused_tokens": float(reused[row]), "batch_rows": float(len(lengths))}))
    return gens


def _stop_ids(model) -> set[int]:
    """The token ids `generate` stops a row at (the generation config's eos)."""
    config = getattr(getattr(model, "peft_model", None), "generation_config", None) or getattr(
        model.base_model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = model.tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else ({int(eos)} if eos is not None else set())


def _mem_id(model) -> int:
    return int(model.mem_token_id)


def send_batch(sessions: Sequence, texts: Sequence[str]) -> list[str | RheaError]:
    """Send `texts[i]` to `sessions[i]` for every i, generating all replies in one batch.

    Like calling each session's `send`, except that the generation is shared; returns each
    reply, or the `RheaError` that row raised (e.g. `ContextOverflowError`), in order. The
    sessions must share the model, `max_new_tokens` and generation settings.
    """
    if len(sessions) != len(texts):
        raise BatchError(f"{len(sessions)} sessions but {len(texts)} texts; pass one text per session")
    if not sessions:
        return []
    first = sessions[0]
    for s in sessions[1:]:
        if s.model is not first.model or s.max_new_tokens != first.max_new_tokens \
                or s.generation_kwargs != first.generation_kwargs:
            raise BatchError("sessions in one batch must share the model, max_new_tokens and generation_kwargs")
    results: list[str | RheaError | None] = [None] * len(sessions)
    staged: list = [None] * len(sessions)
    groups: dict[str, list[int]] = {}
    for i, (session, text) in enumerate(zip(sessions, texts)):
        try:
            staged[i] = session.begin_turn(text)
            if staged[i].answered is not None:
                results[i] = session.end_turn(staged[i], session._answered_generation(staged[i]))
                continue
            n_prompt = int(render(staged[i].plan, session.tokenizer).input_ids.shape[1])
            limit = session.model.max_context
            if limit is not None and n_prompt + session.max_new_tokens > limit:
                raise ContextOverflowError(
                    f"the plan renders to {n_prompt} tokens; with max_new_tokens={session.max_new_tokens} that "
                    f"exceeds the model's context of {limit}")
        except RheaError as e:
            results[i] = e
            continue
        groups.setdefault(session._adapter_for(staged[i].plan), []).append(i)
    generated: dict[int, Generation] = {}
    for adapter, rows in groups.items():
        caches = [sessions[i].prefix_cache if isinstance(sessions[i].prefix_cache, HistoryKVCache) else None
                  for i in rows]
        gens = generate_batch(first.model, [staged[i].plan for i in rows], max_new_tokens=first.max_new_tokens,
                              adapter=adapter, caches=caches, **first.generation_kwargs)
        generated.update(zip(rows, gens))
    observed = _observe_together(sessions, staged, generated)
    for i, gen in generated.items():
        results[i] = sessions[i].end_turn(staged[i], gen, observed_s=observed[i])
    return results  # type: ignore[return-value]


def _observe_together(sessions: Sequence, staged: Sequence, generated: dict[int, Generation]) -> dict[int, float]:
    """Each generated row's turn observed by its session's policy, the policies of one class together
    (`ContextPolicy.observe_batch`: e.g. K rolling summaries rewritten in one batch); returns the
    seconds each row's group took (shared by its rows, as the batch's prefill and decode are)."""
    from rhea.context import Turn

    by_class: dict[type, list[int]] = {}
    for i in generated:
        by_class.setdefault(type(sessions[i].policy), []).append(i)
    seconds: dict[int, float] = {}
    for cls, rows in by_class.items():
        t0 = time.perf_counter()
        cls.observe_batch([sessions[i].policy for i in rows], [Turn(staged[i].text, generated[i].text) for i in rows])
        seconds.update(dict.fromkeys(rows, time.perf_counter() - t0))
    return seconds


__all__ = ["BatchError", "generate_batch", "send_batch"]
