"""How latents enter the generate pass: the latent projector (`LatentInjector`) and the hooks that write
latents into the `<mem>` slots.

* `add_mem_token` gives the tokenizer the `<mem>` placeholder and the embeddings its row.
* `embed_latents` puts one (projected) latent row into each `<mem>` placeholder's input embedding, in
  order -- the LLaVA convention for image features.
* `deep_latents` (``latent_injection="deep"`` / ``"states"``) also writes them into the slot's residual
  stream at the input of every decoder layer, through forward pre-hooks.
* `record_slot_states` (``"states"``) collects the slots' states at each layer's input during a compress
  pass, which ``"states"`` latents carry.

Everything here takes the pieces it works on (the base model, its decoder layers, the injector) as
arguments; `RheaForCausalLM` calls it with its own.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from rhea.constants import MEM_TOKEN
from rhea.errors import LatentMismatchError, RheaConfigError

#: rank of the per-layer correction of `latent_injection="deep"`
DEEP_RANK = 64
#: injection modes with a `LatentInjector` (``"raw"`` feeds the final hidden states as they are)
INJECTOR_MODES = ("norm", "projector", "deep", "states")


def add_mem_token(base: nn.Module, tokenizer) -> int:
    """Add `<mem>` to the tokenizer (special, atomic) and give it an embedding row.

    The row is the mean of the existing vocabulary embeddings: deterministic on every load
    (``mean_resizing=True`` would draw random rows). Returns the token id.
    """
    from tokenizers import AddedToken

    if MEM_TOKEN not in tokenizer.get_vocab():
        tokenizer.add_tokens([AddedToken(MEM_TOKEN, special=True, normalized=False)], special_tokens=True)
    mem_id = tokenizer.convert_tokens_to_ids(MEM_TOKEN)
    emb = base.get_input_embeddings()
    old_rows = emb.weight.shape[0]
    if mem_id >= old_rows:
        base.resize_token_embeddings(mem_id + 1, mean_resizing=False)
        with torch.no_grad():
            weight = base.get_input_embeddings().weight
            weight[old_rows:] = weight[:old_rows].float().mean(0).to(weight.dtype)
            out = base.get_output_embeddings()
            if out is not None and out.weight.data_ptr() != weight.data_ptr():
                out.weight[old_rows:] = out.weight[:old_rows].float().mean(0).to(out.weight.dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return mem_id


class LatentInjector(nn.Module):
    """Maps compress-side latents (final hidden states) into the generate pass's embedding space.

    The final hidden states of a small LM carry a large component common to every position
    (norm ~40 of ~50 on SmolLM2-135M, against token embeddings of norm ~3.2), so raw latents
    enter the generate pass as one shared direction at an off-scale norm. ``"norm"`` subtracts a
    learned centre and rescales each slot to the mean token-embedding norm; ``"projector"`` then
    applies a learned linear map (identity-initialised, as LLaVA/xRAG project into the embedding
    space); ``"deep"`` adds a low-rank per-layer term (`at_layer`); ``"states"`` projects the final
    states and writes the compress pass's own per-layer slot states at the layers above.

    >>> inj = LatentInjector(4, "projector", target_norm=2.0)
    >>> out = inj(torch.tensor([[3.0, 0.0, 0.0, 4.0]])).detach()
    >>> [round(float(v), 3) for v in out[0]], round(float(out.norm()), 3)
    ([1.2, 0.0, 0.0, 1.6], 2.0)
    """

    def __init__(self, hidden: int, mode: str, target_norm: float, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, n_layers: int = 0, rank: int = DEEP_RANK):
        super().__init__()
        if mode not in INJECTOR_MODES:
            raise RheaConfigError(f"LatentInjector mode {mode!r} must be 'norm', 'projector', 'deep' or 'states'")
        if mode == "deep" and n_layers < 1:
            raise RheaConfigError(f"latent_injection='deep' needs the decoder's layer count, got n_layers={n_layers}")
        self.mode = mode
        self.center = nn.Parameter(torch.zeros(hidden, dtype=dtype, device=device))
        self.register_buffer("target_norm", torch.tensor(float(target_norm), dtype=torch.float32, device=device))
        self.proj = None
        if mode in ("projector", "deep", "states"):  # "states": the projector maps the final states to the input
            self.proj = nn.Linear(hidden, hidden, dtype=dtype, device=device)
            with torch.no_grad():
                self.proj.weight.copy_(torch.eye(hidden, dtype=dtype))
                self.proj.bias.zero_()
        self.layer_down = self.layer_up = None
        if mode == "deep":
            # per decoder layer a low-rank, latent-dependent addition to the slot's residual stream,
            # LoRA-style: down random, up zero, so a fresh injector adds nothing (= "projector")
            r = min(rank, hidden)
            g = torch.Generator().manual_seed(0)
            down = torch.randn(n_layers, r, hidden, generator=g) / math.sqrt(hidden)
            self.layer_down = nn.Parameter(down.to(dtype=dtype, device=device))
            self.layer_up = nn.Parameter(torch.zeros(n_layers, hidden, r, dtype=dtype, device=device))

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        y = latents.float() - self.center.float()
        y = y / y.norm(dim=-1, keepdim=True).clamp_min(1e-6) * self.target_norm
        if self.proj is not None:
            y = torch.nn.functional.linear(y, self.proj.weight.float(), self.proj.bias.float())
        return y.to(latents.dtype)

    @property
    def n_layers(self) -> int:
        """Decoder layers the latent is written into (0: the input embeddings only)."""
        return 0 if self.layer_down is None else int(self.layer_down.shape[0])

    def at_layer(self, rows: torch.Tensor, layer: int) -> torch.Tensor:
        """``"deep"``: what is added to a `<mem>` slot's residual stream at the input of decoder
        `layer`, from `rows` = this injector's output (``[R, hidden]``). Zero at initialisation, so
        a fresh ``"deep"`` injector is exactly ``"projector"``."""
        y = rows.float()
        return ((y @ self.layer_down[layer].float().T) @ self.layer_up[layer].float().T).to(rows.dtype)

    @torch.no_grad()
    def fit_center(self, latents: torch.Tensor) -> None:
        """Set the centre to the mean of `latents` (``[..., hidden]``), e.g. of a few training texts."""
        self.center.copy_(latents.reshape(-1, latents.shape[-1]).float().mean(0).to(self.center.dtype))

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}


def embedding_norm(base: nn.Module, vocab: int | None) -> float:
    """Mean norm of `base`'s input-embedding rows (the first `vocab` of them, when given): the scale
    `LatentInjector` rescales latents to."""
    weight = base.get_input_embeddings().weight
    rows = weight[:vocab] if vocab else weight
    return float(rows.detach().float().norm(dim=-1).mean())


def decoder_layers(base: nn.Module) -> nn.ModuleList:
    """The decoder layers of Hugging Face causal LM `base` (Llama/Qwen/Mistral-style ``decoder.layers``)."""
    decoder = base.get_decoder()
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise RheaConfigError(f"{type(decoder).__name__} has no `.layers`; latent_injection='deep' needs a "
                              "decoder with a list of layers (Llama/Qwen/Mistral-style)")
    return layers


def embed_latents(embeddings: nn.Module, input_ids: torch.Tensor, latent_embeds: torch.Tensor | None, *,
                  mem_token_id: int, latent_width: int, n_mem: int, injector: LatentInjector | None = None):
    """(embeddings ``[B, S, hidden]``, slot mask ``[B, S]``, rows for `deep_latents` or None).

    The token embeddings of `input_ids` (through `embeddings`) with each `<mem>` placeholder replaced, in
    order, by a row of `latent_embeds` (``[R, latent_width]`` or any ``[..., latent_width]``, flattened
    row-major; R must equal the placeholders in the whole batch, counted row by row), through `injector`
    when given. The third item is what `deep_latents` writes into every decoder layer: the injected rows,
    or under ``"states"`` (``latent_width`` > hidden) the stored per-layer states.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
    embeds = embeddings(input_ids)
    slots = input_ids == mem_token_id
    n_slots = int(slots.sum())
    if latent_embeds is None:
        if n_slots:
            raise LatentMismatchError(
                f"input_ids contain {n_slots} {MEM_TOKEN} placeholders but no latent_embeds were given; "
                f"pass latent_embeds with {n_slots} rows (or remove the placeholders)"
            )
        return embeds, slots, None
    width, hidden = latent_width, embeds.shape[-1]
    if latent_embeds.shape[-1] != width:
        what = (f"latent_injection='states' latents of {width} = layers x hidden" if width != hidden
                else f"the model's hidden size {hidden}")
        raise LatentMismatchError(
            f"latent_embeds have width {latent_embeds.shape[-1]} but this model takes {what}; "
            "compress with this model (latents of another injection mode or model do not fit)"
        )
    full = latent_embeds.reshape(-1, width)
    rows = full[:, :hidden]
    if injector is not None:
        rows = injector(rows)
    if rows.shape[0] != n_slots:
        raise LatentMismatchError(
            f"input_ids contain {n_slots} {MEM_TOKEN} placeholders but latent_embeds has {rows.shape[0]} rows; "
            f"each latent block of {n_mem} vectors needs exactly {n_mem} placeholders"
        )
    embeds = embeds.masked_scatter(slots.unsqueeze(-1), rows.to(embeds.dtype))
    if width != hidden:  # "states": what `deep_latents` writes at layers 1.. is the stored per-layer states
        rows = full[:, hidden:]
    return embeds, slots, rows


@contextlib.contextmanager
def deep_latents(layers: nn.ModuleList, injector: LatentInjector | None, slots: torch.Tensor,
                 rows: torch.Tensor | None, *, once: bool):
    """``latent_injection="deep"`` / ``"states"``: inside the block, every decoder layer's input at the
    `<mem>` slots gets the latent written in, so each layer's keys and values at a slot read the latent
    directly (as 500xCompressor feeds a frozen decoder the compressed tokens' K/V at every layer), not
    only through what the layers below made of one input embedding. ``"deep"`` adds
    ``injector.at_layer(rows, i)`` at layer i; ``"states"`` replaces the slot's state at layers 1.. with
    the compress pass's own (`rows`' block i - 1).

    `slots` and `rows` are what `embed_latents` returned. A forward call over S tokens is the last S of
    ``slots``' columns (a `generate` prefill after a reused cache feeds only the tokens past it); with
    `once`, only the first call writes (the prefill of `generate`; decode steps feed new tokens). A
    no-op in other modes."""
    if injector is None or injector.mode not in ("deep", "states") or rows is None or not bool(slots.any()):
        yield
        return
    states = injector.mode == "states"
    last = len(layers) - 1
    # column of each latent row (rows are the slots in row-major order)
    columns = slots.nonzero()[:, 1]
    state = {"done": False, "index": None, "rows": None}

    def make(index: int):
        def hook(module, args, kwargs):
            if state["done"]:
                return None
            hidden = args[0] if args else kwargs["hidden_states"]
            batch, width = hidden.shape[:2]
            if batch % slots.shape[0] or width > slots.shape[1]:
                return None
            if index == 0:
                start = slots.shape[1] - width
                tail = slots[:, start:]
                kept = rows[columns >= start]
                k = batch // slots.shape[0]
                if k > 1:  # beams / several return sequences: generate repeats each row k times
                    parts = kept.split(tail.sum(1).tolist())
                    kept = torch.cat([part for part in parts for _ in range(k)])
                    tail = tail.repeat_interleave(k, dim=0)
                state["index"], state["rows"] = tail.nonzero(as_tuple=True), kept  # row-major, as the rows
            if once and index == last:
                state["done"] = True
            if state["rows"] is None or state["rows"].shape[0] == 0:
                return None
            if states:  # the compress pass's own slot state at this layer's input replaces the slot's
                if index == 0:
                    return None
                size = hidden.shape[-1]
                value = state["rows"][:, (index - 1) * size:index * size]
                hidden = hidden.index_put(state["index"], value.to(hidden.dtype), accumulate=False)
            else:
                hidden = hidden.index_put(state["index"], injector.at_layer(state["rows"], index).to(hidden.dtype),
                                          accumulate=True)
            if args:
                return (hidden,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": hidden}
        return hook

    handles = [layer.register_forward_pre_hook(make(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def record_slot_states(layers: nn.ModuleList | None, n: int):
    """Collect the last `n` positions' hidden state at the input of decoder `layers` 1 .. L-1 during the
    block (``"states"`` latents carry them): a list, filled when the block exits, empty for None."""
    per_layer: list[torch.Tensor] = []
    if layers is None:
        yield per_layer
        return
    seen: dict[int, torch.Tensor] = {}

    def make(index: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            seen[index] = hidden[:, -n:, :]
        return hook

    handles = [layer.register_forward_pre_hook(make(i), with_kwargs=True) for i, layer in enumerate(layers) if i]
    try:
        yield per_layer
    finally:
        for h in handles:
            h.remove()
    per_layer.extend(seen[i] for i in range(1, len(layers)))


def check_hooks_survive_recompute(base: nn.Module, injector: LatentInjector | None, training: bool) -> None:
    """A named error where ``"deep"`` / ``"states"`` injection would train under activation checkpointing
    (the hooks are gone when backward recomputes a layer)."""
    if not (injector is not None and injector.mode in ("deep", "states") and training):
        return
    # the new name first; the deprecated one only where it is the only one (a getattr default is evaluated
    # eagerly, and reading the old name warns on every training forward)
    checkpointing = getattr(base, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(base, "is_gradient_checkpointing", False)
    if checkpointing:
        raise RheaConfigError(
            f"latent_injection={injector.mode!r} writes the latents into each layer with hooks that are gone when "
            "activation checkpointing recomputes a layer in backward; turn gradient_checkpointing off")


@contextlib.contextmanager
def forward_kwargs(module: nn.Module, extra: dict):
    """Add `extra` to every forward call of `module` inside the block.

    ``generate()`` rejects kwargs it cannot match to the model's signature, but the anchored
    attention reads them from the forward kwargs that flow down to each layer.
    """
    if not extra:
        yield
        return

    def hook(mod, args, kwargs):
        return args, {**kwargs, **extra}

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


__all__ = ["DEEP_RANK", "INJECTOR_MODES", "LatentInjector", "add_mem_token", "check_hooks_survive_recompute", "decoder_layers",
           "deep_latents", "embed_latents", "embedding_norm", "forward_kwargs", "record_slot_states"]
