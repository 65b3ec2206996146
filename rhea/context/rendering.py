"""`render()`: turn a `ContextPlan` into model inputs.

Latents follow the LLaVA convention: each `Latent` becomes `<mem>` × n in the templated
text, tokenizes to n placeholder ids, and its rows are returned in `latent_embeds` in the
same order, for the model to swap in at the placeholder positions.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from rhea.constants import MEM_TOKEN
from rhea.backends.chat_template import FALLBACK_CHAT_TEMPLATE, apply_chat_template  # noqa: F401 (re-exported)
from rhea.context.latent import Latent
from rhea.context.plan import ContextPlan
from rhea.errors import InvalidTurnError, MissingMemTokenError, PlaceholderCountError, RheaConfigError, SpoofedPlaceholderError

#: What a literal "<mem>" in message text becomes under literal_mem="escape": a word joiner
#: inside the tag, so it reads the same but can no longer match the placeholder token.
ESCAPED_MEM = MEM_TOKEN[0] + "\u2060" + MEM_TOKEN[1:]


@dataclass
class RenderedContext:
    """Model inputs for one plan.

    input_ids: LongTensor[1, L]; latent_embeds: Tensor[R, hidden] (R = number of `<mem>` ids)
    or None; prefix_len: tokens up to and including the end of the system block (0 if none);
    text: the templated string that was tokenized.
    """

    input_ids: torch.Tensor
    latent_embeds: torch.Tensor | None
    prefix_len: int
    text: str


@dataclass
class RenderedBatch:
    """Left-padded model inputs for several plans.

    latent_embeds holds every plan's rows, batch-major then in order, which is the
    row-major order of the `<mem>` ids in `input_ids`. prefix_len[b] = padding + the plan's
    prefix_len, the index just past row b's system block (the padding width when it has none;
    padded keys are masked anyway).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    latent_embeds: torch.Tensor | None
    prefix_len: torch.Tensor
    texts: list[str]


def mem_token_id(tokenizer) -> int:
    """The id of `<mem>` in `tokenizer`, or a clear error if it was never added.

    >>> # tokenizer.add_special_tokens({"additional_special_tokens": ["<mem>"]}) first
    """
    ids = tokenizer.convert_tokens_to_ids(MEM_TOKEN)
    unk = getattr(tokenizer, "unk_token_id", None)
    # get_added_vocab() is small; get_vocab() builds the whole vocabulary dict (~0.1 s) on every call
    added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else tokenizer.get_vocab()
    vocab_has = MEM_TOKEN in added or MEM_TOKEN in tokenizer.get_vocab()
    if ids is None or not vocab_has or (unk is not None and ids == unk):
        raise MissingMemTokenError(
            f"tokenizer {type(tokenizer).__name__} has no {MEM_TOKEN!r} token; add it with "
            f"tokenizer.add_special_tokens({{'additional_special_tokens': [{MEM_TOKEN!r}]}}) "
            "and resize the model's embeddings (rhea.modeling does both when loading)"
        )
    return int(ids)


def _flatten(content, literal_mem: str, where: str) -> tuple[str, list[Latent]]:
    parts = [content] if isinstance(content, str) else content
    text, latents = [], []
    for part in parts:
        if isinstance(part, Latent):
            text.append(MEM_TOKEN * part.n_slots)
            latents.append(part)
            continue
        if MEM_TOKEN in part:
            if literal_mem == "error":
                raise SpoofedPlaceholderError(
                    f"{where} contains the literal text {MEM_TOKEN!r}, which would pose as a latent slot; "
                    f"remove it or render with literal_mem='escape' (it becomes {ESCAPED_MEM!r})"
                )
            part = part.replace(MEM_TOKEN, ESCAPED_MEM)
        text.append(part)
    return "".join(text), latents


def _apply(tokenizer, messages, add_generation_prompt: bool) -> str:
    return apply_chat_template(tokenizer, messages, add_generation_prompt=add_generation_prompt)


def _encode(tokenizer, text: str, offsets: bool = False):
    # Chat templates write their own BOS, so the tokenizer must not add another.
    return tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)


def _prefix_len(tokenizer, messages: list[dict], text: str, ids: list[int]) -> int:
    sys_index = next((i for i, m in enumerate(messages) if m["role"] == "system"), None)
    if sys_index is None:
        return 0
    head = None
    try:
        head = _apply(tokenizer, messages[: sys_index + 1], add_generation_prompt=False)
    except Exception:  # some templates refuse a conversation without a user message
        head = None
    if head and text.startswith(head):
        head_ids = _encode(tokenizer, head)["input_ids"]
        if ids[: len(head_ids)] == head_ids:
            return len(head_ids)
        char_end = len(head)
    else:
        char_end = _system_end_by_probe(tokenizer, messages[: sys_index + 1], text)
    if char_end is None:
        # Last resort: the end of the system text itself (closing markup excluded).
        content = messages[sys_index]["content"]
        pos = text.find(content)
        if pos < 0:
            raise InvalidTurnError(
                "cannot locate the system block in the templated text; the chat template rewrites the "
                "system message. Render with a template that writes system content verbatim"
            )
        char_end = pos + len(content)
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidTurnError("prefix_len needs offsets from a fast tokenizer for this chat template; load it with use_fast=True")
    offsets = _encode(tokenizer, text, offsets=True)["offset_mapping"]
    n = sum(1 for start, end in offsets if end <= char_end)
    if any(start < char_end < end for start, end in offsets):
        warnings.warn(f"system block ends inside a token (char {char_end}); prefix_len={n} excludes that token", stacklevel=3)
    return n


_PROBES = ("\u2460probe\u2461", "\u2462probe\u2463")


def _system_end_by_probe(tokenizer, head: list[dict], text: str) -> int | None:
    """For templates that refuse a lone system message: render head + a probe user turn
    twice with different probes; their common prefix ends just after the user header, and
    that header (from a probe turn rendered alone) is cut off again."""
    try:
        a, b = (_apply(tokenizer, head + [{"role": "user", "content": p}], False) for p in _PROBES)
        alone = _apply(tokenizer, [{"role": "user", "content": _PROBES[0]}], False)
    except Exception:
        return None
    common = len(a[: a.index(_PROBES[0])]) if _PROBES[0] in a and a[: a.index(_PROBES[0])] == b[: b.index(_PROBES[1])] else None
    header = alone[: alone.index(_PROBES[0])] if _PROBES[0] in alone else None
    if common is None or header is None or not a[:common].endswith(header):
        return None
    end = common - len(header)
    return end if text.startswith(a[:end]) else None


def render(plan: ContextPlan, tokenizer, *, add_generation_prompt: bool = True, literal_mem: str = "error") -> RenderedContext:
    """Apply the chat template to `plan` with `<mem>` placeholders and tokenize it.

    literal_mem: "error" (default) rejects message text containing the literal "<mem>";
    "escape" rewrites it to `ESCAPED_MEM` so it stays text.

    >>> from rhea.context import ContextPlan, Latent, render
    >>> plan = ContextPlan([{"role": "system", "content": "Be brief."},
    ...                     {"role": "assistant", "content": ["Earlier: ", Latent(torch.zeros(2, 8), 0)]},
    ...                     {"role": "user", "content": "And now?"}])
    >>> out = render(plan, tokenizer)  # doctest: +SKIP
    >>> out.latent_embeds.shape        # doctest: +SKIP
    torch.Size([2, 8])
    """
    if literal_mem not in ("error", "escape"):
        raise RheaConfigError(f"literal_mem={literal_mem!r} must be 'error' or 'escape'")
    if not isinstance(plan, ContextPlan):
        raise InvalidTurnError(f"render() takes a ContextPlan, got {type(plan).__name__}")
    if not plan.messages:
        raise InvalidTurnError("plan has no messages; a policy must at least add the user query")
    flat, latents = [], []
    for i, m in enumerate(plan.messages):
        text, found = _flatten(m["content"], literal_mem, f"message {i} ({m['role']})")
        flat.append({"role": m["role"], "content": text})
        latents.extend(found)
    mem_id = mem_token_id(tokenizer) if latents else None

    text = _apply(tokenizer, flat, add_generation_prompt)
    ids = _encode(tokenizer, text)["input_ids"]
    input_ids = torch.tensor([ids], dtype=torch.long)

    latent_embeds = None
    if latents:
        hidden = {lt.hidden_size for lt in latents}
        dtypes = {lt.vectors.dtype for lt in latents}
        if len(hidden) > 1 or len(dtypes) > 1:
            raise InvalidTurnError(f"latents in one plan must share hidden size and dtype, got sizes {sorted(hidden)} dtypes {sorted(map(str, dtypes))}")
        # one device: latents restored from a saved session are on the CPU, new ones on the model's
        latent_embeds = torch.cat([lt.vectors.to(latents[0].vectors.device) for lt in latents], dim=0)
    expected = 0 if latent_embeds is None else latent_embeds.shape[0]
    # With no latents the tokenizer may still lack <mem>; then no id can be a placeholder.
    found = int((input_ids == mem_id).sum()) if mem_id is not None else _count_mem_if_known(tokenizer, input_ids)
    if found != expected:
        raise PlaceholderCountError(
            f"rendered text holds {found} {MEM_TOKEN!r} ids but the plan has {expected} latent rows; "
            "the chat template or tokenizer altered the placeholders (is <mem> an added special token?)"
        )
    return RenderedContext(input_ids, latent_embeds, _prefix_len(tokenizer, flat, text, ids), text)


def _count_mem_if_known(tokenizer, input_ids: torch.Tensor) -> int:
    try:
        return int((input_ids == mem_token_id(tokenizer)).sum())
    except MissingMemTokenError:
        return 0


def render_batch(plans: list[ContextPlan], tokenizer, *, add_generation_prompt: bool = True, literal_mem: str = "error") -> RenderedBatch:
    """Render several plans and left-pad them to one batch.

    >>> batch = render_batch([plan_a, plan_b], tokenizer)  # doctest: +SKIP
    >>> batch.input_ids.shape, batch.prefix_len            # doctest: +SKIP
    (torch.Size([2, 41]), tensor([12, 17]))
    """
    if not plans:
        raise InvalidTurnError("render_batch needs at least one plan")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise InvalidTurnError("tokenizer has neither pad_token nor eos_token; set tokenizer.pad_token before batching")
    rendered = [render(p, tokenizer, add_generation_prompt=add_generation_prompt, literal_mem=literal_mem) for p in plans]
    width = max(r.input_ids.shape[1] for r in rendered)
    input_ids = torch.full((len(rendered), width), int(pad_id), dtype=torch.long)
    attention_mask = torch.zeros((len(rendered), width), dtype=torch.long)
    prefix = torch.zeros(len(rendered), dtype=torch.long)
    for b, r in enumerate(rendered):
        n = r.input_ids.shape[1]
        # Left padding keeps every sequence's last token at the end, where generation starts.
        input_ids[b, width - n :] = r.input_ids[0]
        attention_mask[b, width - n :] = 1
        prefix[b] = r.prefix_len + (width - n)
    embeds = [r.latent_embeds for r in rendered if r.latent_embeds is not None]
    if embeds and (len({e.shape[1] for e in embeds}) > 1 or len({e.dtype for e in embeds}) > 1):
        raise InvalidTurnError("latents across the batch must share hidden size and dtype")
    latent_embeds = torch.cat(embeds, dim=0) if embeds else None
    return RenderedBatch(input_ids, attention_mask, latent_embeds, prefix, [r.text for r in rendered])
