"""Keys/values of a conversation's last prompt and reply, reused by the next turn (any batch).

A multi-turn prompt mostly repeats the previous one: the system block, the earlier turns, the
last reply. `HistoryKVCache` keeps, per conversation, the token ids and keys/values of the last
prompt plus the reply generated after it; the next prompt prefills only what follows their
longest common prefix. That prefix stops at the first differing token, at the first `<mem>`
slot whose latent changed, and one token before the prompt's end (generation needs one new
input); it is empty when the model, its weights (any in-place update), the adapter, dtype,
device or the anchored block's length differ. Nothing is trusted that is not checked, so a
policy that edits, drops or compresses earlier turns only loses the reuse past the edit.

`generate_reusing` answers several rows at once: each row prefills only its new tokens, one row
at a time (a padded batch would cost its longest row's new tokens times the rows), then the
rows, left-padded with their keys/values in one cache, decode together. Position ids follow
the attention mask, so a row's keys/values are the ones it had unpadded. After generation each
row's cache keeps that row's real positions only.

Greedy replies equal those without reuse up to the last bits of the arithmetic (a prefill split
in two sums in another order); with one row the tiny test models give the same tokens.
"""
from __future__ import annotations

import weakref
from typing import Sequence

import torch

from rhea.backends.llm import cache_keyword


def weights_version(model) -> int:
    """Sum of the in-place version counters of every parameter: any optimizer step, ``copy_``
    or ``load_state_dict`` on the model changes it, so a cache keyed on it goes stale."""
    return sum(p._version for p in model.parameters())


def _anchored(model) -> bool:
    return bool(getattr(model, "anchor_attention_registered", False)) and \
        float(getattr(model.config, "anchor_bias", 0.0)) > 0


class HistoryKVCache:
    """One conversation's last sequence (prompt + reply) and its keys/values.

    >>> cache = HistoryKVCache()
    >>> gen = generate_from_plan(model, plan, prefix_cache=cache)         # doctest: +SKIP
    >>> gen2 = generate_from_plan(model, next_plan, prefix_cache=cache)   # doctest: +SKIP
    >>> gen2.timings["prefix_reused_tokens"], cache.hits                  # doctest: +SKIP
    (57.0, 1)
    """

    def __init__(self) -> None:
        self.hits = 0           # turns that reused at least one token
        self.misses = 0         # turns that reused none
        self.reused_tokens = 0  # tokens not prefilled again, over all turns
        self.clear()

    def clear(self) -> None:
        """Forget the stored sequence (the next turn prefills everything)."""
        self._ids: list[int] = []
        self._latents: torch.Tensor | None = None
        self._kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._key: tuple | None = None
        self._model: weakref.ref | None = None
        self._block = 0
        self.prompt_tokens = 0  # of the stored ids, how many were the prompt (the rest: the reply)

    def __len__(self) -> int:
        """Tokens whose keys/values are stored."""
        return len(self._ids) if self._kv is not None else 0

    @staticmethod
    def _key_for(model, adapter: str) -> tuple:
        return (weights_version(model), adapter, model.dtype, str(model.device),
                float(getattr(model.config, "anchor_bias", 0.0)))

    def reusable(self, model, ids: Sequence[int], latents: torch.Tensor | None, block: int, adapter: str) -> int:
        """How many leading tokens of the prompt `ids` (with `latents`, one row per `<mem>` slot in
        order, and an instruction block of `block` tokens) can take their keys/values from here."""
        if self._kv is None or self._model is None or self._model() is not model \
                or self._key != self._key_for(model, adapter):
            return 0
        if _anchored(model) and block != self._block:
            return 0
        n = 0
        limit = min(len(self._ids), len(ids) - 1)
        while n < limit and self._ids[n] == ids[n]:
            n += 1
        mem = int(model.mem_token_id)
        slot = 0
        for i in range(n):  # a <mem> slot is the same token whatever it holds: compare the latents
            if ids[i] == mem:
                same = (latents is not None and self._latents is not None and slot < len(self._latents)
                        and slot < len(latents) and torch.equal(self._latents[slot], latents[slot].to(self._latents)))
                if not same:
                    return i
                slot += 1
        return n

    def common_prefix(self, ids: Sequence[int]) -> int:
        """Length of the common prefix of the stored ids and `ids` (tokens only; `reusable` also
        checks the model, adapter and latents)."""
        if self._kv is None:
            return 0
        n, limit = 0, min(len(self._ids), len(ids))
        while n < limit and self._ids[n] == ids[n]:
            n += 1
        return n

    def fork(self, n: int) -> "HistoryKVCache":
        """A new cache holding the first `n` stored tokens (views, not copies: stored tensors are
        replaced, never written into), for a conversation that branches off this one."""
        other = HistoryKVCache()
        if self._kv is not None and n > 0:
            other._ids = self._ids[:n]
            other._latents = self._latents
            other._kv = self.keys_values(n)
            other._key, other._model, other._block = self._key, self._model, self._block
            other.prompt_tokens = min(self.prompt_tokens, n)
        return other

    def keys_values(self, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first `n` positions' keys and values, per layer (``[1, heads, n, head_dim]``)."""
        assert self._kv is not None
        return [(k[:, :, :n], v[:, :, :n]) for k, v in self._kv]

    def store(self, model, ids: list[int], latents: torch.Tensor | None, block: int, adapter: str,
              kv: list[tuple[torch.Tensor, torch.Tensor]], prompt_tokens: int = 0) -> None:
        """Keep `ids` (prompt then reply tokens; the first `prompt_tokens` were the prompt) and
        their per-layer keys/values."""
        self._ids = list(ids)
        self._latents = None if latents is None else latents.detach().reshape(-1, latents.shape[-1])
        self._kv = kv
        self._key = self._key_for(model, adapter)
        self._model = weakref.ref(model)
        self._block = int(block)
        self.prompt_tokens = int(prompt_tokens)


def reuse_allowed(generate_kwargs: dict) -> bool:
    """Whether generation settings let a cache be passed in and read back per row: the cache is
    the caller's (``use_cache`` on, none passed) and each row is one sequence (no beams, one
    return sequence), so row b of the cache after `generate` is row b's."""
    return (generate_kwargs.get("use_cache", True) and "past_key_values" not in generate_kwargs
            and "cache" not in generate_kwargs and int(generate_kwargs.get("num_beams") or 1) == 1
            and int(generate_kwargs.get("num_return_sequences") or 1) == 1)


def _dense_layers(cache) -> bool:
    """Whether every layer of a transformers cache keeps all positions (no sliding window)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def _prefill_row(model, ids: list[int], latents: torch.Tensor | None, block: int, cache: HistoryKVCache | None,
                 reused: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys/values of ``ids[:-1]`` for one row: the first `reused` from `cache`, the rest computed
    here in one forward (no padding), under whatever adapter context the caller holds."""
    from transformers import DynamicCache

    n = len(ids)
    past = DynamicCache()
    if reused:
        for layer, (k, v) in enumerate(cache.keys_values(reused)):
            past.update(k.to(model.device), v.to(model.device), layer)
    if reused < n - 1:
        # the new tokens with the latent rows of the `<mem>` slots among them (the reused part holds
        # the first `before` rows), through model(input_ids=...) so every latent_injection applies
        before = sum(1 for t in ids[:reused] if t == model.mem_token_id)
        inside = sum(1 for t in ids[reused:n - 1] if t == model.mem_token_id)
        lat = None
        if inside:
            lat = latents.reshape(-1, latents.shape[-1])[before:before + inside].to(model.device)
        suffix = torch.tensor([ids[reused:n - 1]], dtype=torch.long, device=model.device)
        positions = torch.arange(reused, n - 1, device=model.device).unsqueeze(0)
        with torch.no_grad():
            model(input_ids=suffix, latent_embeds=lat,
                  attention_mask=torch.ones((1, n - 1), dtype=torch.long, device=model.device),
                  position_ids=positions, prefix_len=torch.tensor([block]), use_cache=True, logits_to_keep=1,
                  **{cache_keyword(model): past})
    return [(layer.keys, layer.values) for layer in past.layers]


def generate_reusing(model, rows: Sequence, caches: Sequence[HistoryKVCache | None], *, adapter: str,
                     generate, **generate_kwargs) -> tuple[torch.Tensor, int, list[int]]:
    """Generate for `rows` (each a `rhea.context` rendering of one row: ``input_ids [1, n]``,
    ``latent_embeds``, ``prefix_len``), reusing and refreshing each row's `caches` entry.

    When no row can reuse anything the rows are prefilled as one left-padded batch. Otherwise
    each row prefills its own new tokens but the last, one row at a time (so a batch costs the
    sum of the rows' new tokens, not the longest times the rows), and the batch, left-padded
    with those keys/values in its cache, starts generating from each row's last prompt token.
    `generate(input_ids, latent_embeds, attention_mask, prefix_len, cache, **kw)` runs the model
    (the caller picks adapters and streamers). Returns ``(out, width, reused)``: the output ids
    ``[B, width + new]``, the padded prompt width, and the tokens each row reused.
    """
    from transformers import DynamicCache

    if len(rows) != len(caches):
        raise ValueError(f"{len(rows)} rows but {len(caches)} caches")
    ids = [r.input_ids[0].tolist() for r in rows]
    lat = [r.latent_embeds for r in rows]
    blocks = [int(r.prefix_len) for r in rows]
    reused = [c.reusable(model, i, l, b, adapter) if c is not None else 0
              for c, i, l, b in zip(caches, ids, lat, blocks)]
    width, B = max(len(i) for i in ids), len(rows)
    tok = model.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    input_ids = torch.full((B, width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((B, width), dtype=torch.long)
    prefix = torch.zeros(B, dtype=torch.long)
    for b, row in enumerate(ids):
        input_ids[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[b, width - len(row):] = 1
        prefix[b] = blocks[b] + width - len(row)  # counted from position 0, like render_batch's
    past = DynamicCache()
    if any(reused):
        per_row = [_prefill_row(model, i, l, b, c, r) for i, l, b, c, r in zip(ids, lat, blocks, caches, reused)]
        for layer, (k0, v0) in enumerate(per_row[0]):
            k = k0.new_zeros((B, k0.shape[1], width - 1, k0.shape[3]))
            v = v0.new_zeros((B, v0.shape[1], width - 1, v0.shape[3]))
            for b, row in enumerate(per_row):  # right-aligned: each row's last prompt token is fed next
                k[b, :, width - len(ids[b]):] = row[layer][0][0]
                v[b, :, width - len(ids[b]):] = row[layer][1][0]
            past.update(k, v, layer)
        del per_row
    embeds = [x for x in lat if x is not None]
    latents = torch.cat(embeds, dim=0).to(model.device) if embeds else None
    out = generate(input_ids.to(model.device), latents, mask.to(model.device), prefix, past, **generate_kwargs)
    if not _dense_layers(past):  # a sliding-window cache drops positions: nothing to keep
        for c in caches:
            if c is not None:
                c.clear()
        return out, width, reused
    fed = past.get_seq_length()  # prompt + all new tokens but the last (never fed back)
    for b, cache in enumerate(caches):
        if cache is None:
            continue
        # a row that stopped early was fed padding after its end; kept too: a next prompt matches
        # it only where it holds the same tokens, whose keys/values these then are
        new = out[b, width:fed].tolist()
        index = torch.arange(width - len(ids[b]), width + len(new), device=past.layers[0].keys.device)
        kv = [(layer.keys[b:b + 1].index_select(2, index).clone(),
               layer.values[b:b + 1].index_select(2, index).clone()) for layer in past.layers]
        cache.store(model, ids[b] + new, lat[b], blocks[b], adapter, kv, prompt_tokens=len(ids[b]))
        if reused[b]:
            cache.hits += 1
            cache.reused_tokens += reused[b]
        else:
            cache.misses += 1
    return out, width, reused


__all__ = ["HistoryKVCache", "cache_keyword", "generate_reusing", "reuse_allowed", "weights_version"]
