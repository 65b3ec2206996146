"""`RheaForCausalLM`: one backbone, two named LoRA adapters, and `<mem>` latent slots.

* ``compress(texts)`` runs the backbone with the **compress** adapter on ``text + <mem>×n`` and
  reads the final hidden states at the n slots: one ``[n, hidden]`` latent block per text.
* ``forward``/``generate`` run the **generate** adapter on ``input_ids`` in which ``<mem>``
  placeholders (n per latent block) have their embeddings replaced, in order, by supplied
  latent vectors -- the LLaVA convention for image features.

This file holds the model: construction, compression, forward and generation. Its parts live
beside it, as functions over the pieces passed in: the latent projector and injection hooks
(`rhea.modeling.projector`), the adapter switching and merged decoding
(`rhea.modeling.adapters`), slot and rank surgery (`rhea.modeling.capacity`) and the checked,
atomic checkpoint I/O (`rhea.modeling.checkpoint`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from rhea.constants import MEM_TOKEN
from rhea.errors import CheckpointError, InvalidTextError, RheaConfigError
from rhea.modeling import capacity, checkpoint, projector
from rhea.modeling.adapters import ADAPTERS, LoraAdapters, lora_config, quiet_peft
from rhea.modeling.checkpoint import INJECTOR_WEIGHTS_NAME, MEM_WEIGHTS_NAME, text_config
from rhea.modeling.config import CONFIG_NAME, RheaConfig
from rhea.modeling.projector import LatentInjector, add_mem_token
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME, ScoreHead


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding, so a padded row computes exactly as if unpadded."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class RheaForCausalLM(nn.Module):
    """A causal LM with a compress adapter, a generate adapter and `<mem>` latent slots.

    Build one on any Hugging Face causal LM, or load a saved one:

    >>> from rhea import RheaForCausalLM, load_base_model            # doctest: +SKIP
    >>> base, tok = load_base_model("smollm2-135m")                   # doctest: +SKIP
    >>> model = RheaForCausalLM.from_base(base, tok)                  # doctest: +SKIP
    >>> latents = model.compress(["Paris is the capital of France."])  # [1, 8, 576]  # doctest: +SKIP
    >>> ids = tok("<mem>" * 8 + " What city?", return_tensors="pt").input_ids    # doctest: +SKIP
    >>> out = model.generate(ids, latent_embeds=latents, max_new_tokens=8)      # doctest: +SKIP
    >>> model.save_pretrained("my-rhea")                              # doctest: +SKIP
    >>> model = RheaForCausalLM.from_pretrained("my-rhea")            # doctest: +SKIP
    """

    def __init__(self, peft_model, tokenizer, config: RheaConfig, mem_token_id: int):
        super().__init__()
        self.peft_model = peft_model
        self.tokenizer = tokenizer
        self.config = config
        self.mem_token_id = int(mem_token_id)
        hidden = self.hidden_size
        # Trainable embeddings of the n compression read-out slots (saved by us, not PEFT).
        self.mem_slot_embeds = nn.Parameter(torch.zeros(config.n_mem, hidden, dtype=self.dtype, device=self.device))
        # Offsets added to those slots by piece index when a reply is compressed in pieces
        # (RheaConfig.compress_piece_embeddings; None when 0). Zero at start: no change until trained.
        self.register_parameter("mem_piece_embeds", None)
        if config.compress_piece_embeddings:
            self.mem_piece_embeds = nn.Parameter(torch.zeros(config.compress_piece_embeddings, hidden,
                                                             dtype=self.dtype, device=self.device))
        # How latents enter the generate pass (None = raw final hidden states).
        self.latent_injector = None
        if config.latent_injection != "raw":
            self.latent_injector = LatentInjector(hidden, config.latent_injection,
                                                  projector.embedding_norm(self.base_model, config.base_vocab_size),
                                                  dtype=self.dtype, device=self.device,
                                                  n_layers=len(self.decoder_layers()) if config.latent_injection == "deep" else 0)
        # A learned retrieval read-out over the latents (RheaConfig.score_head; None = score the final states).
        self.score_head = None
        if config.score_head:
            blocks = self.latent_width // hidden
            bad = [i for i in config.score_head_layers if i >= blocks]
            if bad:
                raise RheaConfigError(f"score_head_layers {bad} do not exist: a latent of this model holds {blocks} "
                                      f"block(s) (0 = the final states; 1 .. {blocks - 1} the per-layer slot states)")
            self.score_head = ScoreHead(hidden, config.score_head, config.score_head_layers, device=self.device)
        self.peft_model.set_requires_grad(list(ADAPTERS), True)
        self.anchor_attention_registered = False
        #: `generate` decodes through weights with the generate LoRA folded in (see `merged`) instead of
        #: running each layer's low-rank branch: the same tokens, one cached copy of the adapted weights
        #: in memory. None (default) = on CUDA where the copy fits (docs/reports/gpu.md: 2.05x -> 1.12x
        #: the base model per token on an H100); True / False force it.
        self.decode_merged: bool | None = None
        #: `generate` runs the linear layers of its decoding steps (1-16 rows: one token per sequence; one
        #: row only on layers of >= 1M weights) through `rhea_kernels.decode_linear`, the C++ kernel built for
        #: that shape, and leaves the prompt's prefill to BLAS. None (default) = on a CPU with fp32 weights where
        #: the extension has the kernel (docs/guides/kernels.md: Qwen2.5-1.5B's decoding step 1.74x faster than MKL at
        #: batch 1 and 2.71x at batch 8 on this project's AVX2 CPU); True / False force it.
        self.decode_kernel: bool | None = None
        self._lora_adapters = LoraAdapters(peft_model)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_base(cls, base: nn.Module, tokenizer, config: RheaConfig | None = None) -> "RheaForCausalLM":
        """Wrap a plain HF causal LM with fresh (untrained) compress and generate adapters."""
        from peft import get_peft_model

        config = RheaConfig.from_dict(config.to_dict()) if config is not None else RheaConfig()
        config.base_model = config.base_model or getattr(base.config, "_name_or_path", None) or None
        config.base_hidden_size = int(text_config(base.config).hidden_size)
        config.base_vocab_size = int(base.get_input_embeddings().weight.shape[0])
        config.extra.setdefault("adapters_trained", False)
        mem_id = add_mem_token(base, tokenizer)
        with quiet_peft():
            peft_model = get_peft_model(base, lora_config(config), adapter_name="compress")
            peft_model.add_adapter("generate", lora_config(config))
        model = cls(peft_model, tokenizer, config, mem_id)
        with torch.no_grad():
            vocab = base.get_input_embeddings().weight[: config.base_vocab_size]
            model.mem_slot_embeds.copy_(vocab.float().mean(0).to(model.mem_slot_embeds.dtype).expand_as(model.mem_slot_embeds))
        model._apply_anchor_config()
        return model

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, base_model: str | nn.Module | None = None, *,
                        dtype: torch.dtype = torch.float32) -> "RheaForCausalLM":
        """Load a directory written by :meth:`save_pretrained` (every file checked: `CheckpointError`).

        `base_model` overrides the base recorded in ``rhea_config.json``: a model-zoo name, a
        path or hub id already on disk, or an already-loaded ``PreTrainedModel``. A directory without
        ``tokenizer/`` has its tokenizer rebuilt from the base model's (``tokenizer_changes.json``).
        """
        from rhea.modeling.zoo import load_base_model, load_base_tokenizer

        directory = Path(directory)
        config = checkpoint.check_checkpoint(directory)
        if base_model is None:
            base_model = checkpoint.recorded_base(directory, config)

        def base_tokenizer():
            if isinstance(base_model, (str, os.PathLike)):
                return load_base_tokenizer(str(base_model))
            name = getattr(base_model.config, "_name_or_path", None) or config.base_model
            if not name:
                raise CheckpointError(f"{directory} stores its tokenizer as changes to the base model's, and the "
                                      "base model given records no name to load that tokenizer from; pass "
                                      "base_model= as a zoo name or path")
            return load_base_tokenizer(str(name))

        tokenizer = checkpoint.load_tokenizer(directory, base_tokenizer)  # before the base model is loaded
        base = load_base_model(str(base_model), dtype=dtype)[0] if isinstance(base_model, (str, os.PathLike)) else base_model
        checkpoint.check_base(base, config, directory)
        mem_id = add_mem_token(base, tokenizer)
        mem = checkpoint.read_mem_weights(directory, config, int(text_config(base.config).hidden_size))
        with torch.no_grad():
            base.get_input_embeddings().weight[mem_id] = mem["mem_token_row"].to(base.dtype)
        model = cls(checkpoint.load_adapters(base, directory), tokenizer, config, mem_id)
        with torch.no_grad():
            model.mem_slot_embeds.copy_(mem["mem_slot_embeds"].to(model.mem_slot_embeds.dtype))
            if model.mem_piece_embeds is not None:
                model.mem_piece_embeds.copy_(mem["mem_piece_embeds"].to(model.mem_piece_embeds.dtype))
        if model.latent_injector is not None:
            mode = f"latent_injection={config.latent_injection!r}"
            checkpoint.load_module_weights(
                model.latent_injector, directory / INJECTOR_WEIGHTS_NAME,
                missing=f"{directory / CONFIG_NAME} sets {mode} but {INJECTOR_WEIGHTS_NAME} is missing; it was not "
                        "fully written by save_pretrained()",
                mismatch=f"{mode} at hidden size {model.hidden_size}")
        if model.score_head is not None:
            model.load_score_head(directory / SCORE_HEAD_WEIGHTS_NAME)
        model._apply_anchor_config()
        return model.eval()

    def save_pretrained(self, directory: str | os.PathLike, *, tokenizer_copy: bool = True) -> None:
        """Write ``rhea_config.json``, ``mem_tokens.safetensors``, ``tokenizer/``, ``compress/``, ``generate/``
        (and the latent injector and score head when the model has them), a model card (``README.md``,
        `rhea.modeling.card`) and ``rhea_manifest.json`` (the SHA-256 of each file, checked by
        `from_pretrained`), atomically: a failure part-way leaves an earlier save in `directory` intact
        (`rhea.modeling.checkpoint.save_checkpoint`). The base model's weights are not copied:
        ``rhea_config.json`` names the base.

        ``tokenizer_copy=False`` stores the tokenizer as ``tokenizer_changes.json`` (what rhea changed in the
        base model's tokenizer: kilobytes instead of megabytes) instead of ``tokenizer/``; loading then needs
        the base model's tokenizer installed, with the same vocabulary.
        """
        base_tokenizer = None
        if not tokenizer_copy:
            from rhea.modeling.zoo import load_base_tokenizer

            if not self.config.base_model:
                raise CheckpointError("save_pretrained(tokenizer_copy=False) stores the tokenizer as changes to the "
                                      "base model's, but the config records no base_model to rebuild it from; set "
                                      "model.config.base_model or keep tokenizer_copy=True")
            base_tokenizer = load_base_tokenizer(self.config.base_model)
        weights = {MEM_WEIGHTS_NAME: checkpoint.mem_weights(
            self.mem_slot_embeds, self.base_model.get_input_embeddings().weight[self.mem_token_id],
            self.mem_piece_embeds, self.mem_token_id)}
        if self.latent_injector is not None:
            weights[INJECTOR_WEIGHTS_NAME] = (self.latent_injector.state(),
                                              {"latent_injection": self.config.latent_injection})
        if self.score_head is not None:
            weights[SCORE_HEAD_WEIGHTS_NAME] = (self.score_head.state(), {
                "score_head": str(self.config.score_head),
                "score_head_layers": ",".join(map(str, self.config.score_head_layers))})
        checkpoint.save_checkpoint(directory, config=self.config, tokenizer=self.tokenizer,
                                   peft_model=self.peft_model, weights=weights, base_tokenizer=base_tokenizer)

    # ------------------------------------------------------------------ properties
    @property
    def base_model(self) -> nn.Module:
        """The underlying Hugging Face model (with LoRA layers injected)."""
        return self.peft_model.get_base_model()

    @property
    def hidden_size(self) -> int:
        return int(text_config(self.base_model.config).hidden_size)

    @property
    def dtype(self) -> torch.dtype:
        return self.base_model.get_input_embeddings().weight.dtype

    @property
    def device(self) -> torch.device:
        return self.base_model.get_input_embeddings().weight.device

    @property
    def n_mem(self) -> int:
        return self.config.n_mem

    @property
    def latent_width(self) -> int:
        """Width of one latent vector: ``hidden``, or ``n_layers * hidden`` under ``latent_injection="states"``
        (the final states first, then the slot's state at the input of decoder layers 1 .. n_layers-1)."""
        if self.config.latent_injection == "states":
            return self.hidden_size * len(self.decoder_layers())
        return self.hidden_size

    @property
    def max_context(self) -> int | None:
        return getattr(text_config(self.base_model.config), "max_position_embeddings", None)

    @property
    def adapters_trained(self) -> bool:
        return bool(self.config.extra.get("adapters_trained", False))

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        """Both adapters' LoRA weights, the `<mem>` slot embeddings and the latent injector (if any)."""
        return (p for p in self.parameters() if p.requires_grad)

    def decoder_layers(self) -> nn.ModuleList:
        """The backbone's decoder layers (`rhea.modeling.projector.decoder_layers`)."""
        return projector.decoder_layers(self.base_model)

    # ------------------------------------------------------------------ capacity (rhea.modeling.capacity)
    def resize_mem_slots(self, n_mem: int) -> None:
        """Change the number of `<mem>` read-out slots of a (trained) model: a capacity warm start that keeps
        the trained slots and starts new ones as copies (`rhea.modeling.capacity.resized_slots`). Latents
        compressed before the resize no longer fit; the recorded ``fidelity`` is cleared (it was measured on
        the old slots) and the thresholds should be re-calibrated (``rhea calibrate``).

        >>> model.resize_mem_slots(16)                                # doctest: +SKIP
        >>> model.compress(["a reply"]).shape[1]                      # doctest: +SKIP
        16
        """
        config = dataclasses.replace(self.config, n_mem=n_mem, fidelity=None)  # RheaConfig validates n_mem
        if n_mem != self.n_mem:
            self.mem_slot_embeds = capacity.resized_slots(self.mem_slot_embeds, n_mem)
            self.config = config

    def resize_piece_embeddings(self, n: int) -> None:
        """Give the compressor `n` piece-index offsets (``RheaConfig.compress_piece_embeddings``): a warm start
        that leaves what the model computes unchanged (`rhea.modeling.capacity.resized_piece_offsets`); shrinking
        drops the offsets of the last piece indices (their pieces then use offset ``n - 1``), ``n = 0`` removes them.

        >>> model.resize_piece_embeddings(8)                          # doctest: +SKIP
        """
        config = dataclasses.replace(self.config, compress_piece_embeddings=n)  # RheaConfig validates n
        old = self.mem_piece_embeds
        if n == (0 if old is None else old.shape[0]):
            return
        self.mem_piece_embeds = capacity.resized_piece_offsets(
            old, n, hidden=self.hidden_size, dtype=self.dtype, device=self.device,
            requires_grad=self.mem_slot_embeds.requires_grad)
        self.config = config

    def lora_rank(self, adapter: str) -> int:
        """The LoRA rank of `adapter` ("compress" or "generate") as its PEFT config records it."""
        return capacity.lora_rank(self.peft_model, adapter)

    def resize_lora_rank(self, adapter: str, r: int, *, seed: int = 0) -> None:
        """Grow the LoRA rank of `adapter` to `r` without changing what the model computes: a capacity warm
        start (`rhea.modeling.capacity.resize_lora_rank`). The adapter's PEFT config records the new rank and
        alpha, so ``save_pretrained`` / ``from_pretrained`` round-trip it (``RheaConfig.lora_r`` stays the rank
        both adapters were created with). Build the optimizer after resizing: the LoRA tensors are new.

        >>> model.resize_lora_rank("compress", 64)                   # doctest: +SKIP
        >>> model.lora_rank("compress")                               # doctest: +SKIP
        64
        """
        capacity.resize_lora_rank(self.peft_model, adapter, r, seed=seed)

    def shrink_lora_rank(self, adapter: str, r: int, *, seed: int = 0) -> dict:
        """Cut the LoRA rank of `adapter` to `r` by a truncated SVD of each layer's update: the smallest file
        (`rhea.modeling.capacity.shrink_lora_rank`, which says what the returned report holds). The inverse of
        :meth:`resize_lora_rank`; measure the shrunk model (``benchmarks/reconstruction.py``) before shipping it.

        >>> model.shrink_lora_rank("compress", 16)                   # doctest: +SKIP
        {'rank_before': 64, 'rank_after': 16, 'layers': 210, 'energy_kept_min': 0.996, ...}
        """
        return capacity.shrink_lora_rank(self.peft_model, adapter, r, seed=seed)

    # ------------------------------------------------------------------ retrieval read-out
    @property
    def score_width(self) -> int:
        """Width of the vectors retrieval scores (`score_view`): ``RheaConfig.score_head``, else ``hidden``."""
        return self.config.score_head or self.hidden_size

    def set_score_head(self, head: ScoreHead | None) -> None:
        """Install a trained `ScoreHead` (or remove it with None) and record it in the config. A centre fitted for the
        old read-out no longer applies: it is cleared (``rhea calibrate`` fits one for the new read-out)."""
        if head is not None and (head.hidden != self.hidden_size or max(head.layers) >= self.latent_width // self.hidden_size):
            raise RheaConfigError(f"score head for hidden {head.hidden}, blocks {list(head.layers)} does not fit this "
                                  f"model (hidden {self.hidden_size}, {self.latent_width // self.hidden_size} blocks)")
        self.score_head = None if head is None else head.to(self.device)
        self.config = dataclasses.replace(self.config, score_head=0 if head is None else head.dim,
                                          score_head_layers=[0] if head is None else list(head.layers),
                                          latent_center=None)

    def load_score_head(self, path: str | os.PathLike) -> None:
        """Load ``score_head.safetensors`` into the head the config describes (`CheckpointError` when missing/mismatched)."""
        path = Path(path)
        checkpoint.load_module_weights(
            self.score_head.proj, path, cast=lambda value, _: value.float(),
            missing=f"rhea_config.json sets score_head={self.config.score_head} but {path} is missing; copy it "
                    "from the directory the head was trained into, or set score_head to 0",
            mismatch=f"score_head={self.config.score_head} over blocks {self.config.score_head_layers} of hidden "
                     f"{self.hidden_size}")

    def score_view(self, latents: torch.Tensor) -> torch.Tensor:
        """What retrieval scores of `latents` (``[..., latent_width]``): the trained `ScoreHead`'s output when the
        config has one (``RheaConfig.score_head``), else the final hidden states (contiguous, as the turn-scoring
        kernels read them)."""
        if self.score_head is not None:
            return self.score_head(latents)
        if latents.shape[-1] == self.hidden_size:
            return latents
        return latents[..., : self.hidden_size].contiguous()

    # ------------------------------------------------------------------ adapters (rhea.modeling.adapters)
    @property
    def lora_adapters(self) -> LoraAdapters:
        """The adapter switching and merged decoding over `peft_model` (made anew if `peft_model` was replaced)."""
        if self._lora_adapters.peft_model is not self.peft_model:
            self._lora_adapters = LoraAdapters(self.peft_model)
        return self._lora_adapters

    def adapter(self, name: str):
        """Context manager: make `name` the active adapter inside the block, leaving every ``requires_grad``
        as it was (`LoraAdapters.use`; PEFT's ``set_adapter`` would freeze the other adapter).

        >>> with model.adapter("compress"):    # doctest: +SKIP
        ...     out = model.peft_model(input_ids)
        """
        return self.lora_adapters.use(name)

    @property
    def active_adapter_name(self) -> str:
        """The LoRA adapter the LoRA layers run now ("compress" or "generate")."""
        return self.lora_adapters.active()

    def disable_adapters(self):
        """Context manager: run the plain base model (no LoRA), e.g. for the recognizer's classifier."""
        return self.peft_model.disable_adapter()

    def merged(self, name: str = "generate"):
        """Context manager: run with adapter `name` folded into cached merged weights and no LoRA branch:
        the same outputs at the base model's cost per token (`LoraAdapters.merged`). Inference only.

        >>> with model.merged("generate"):      # doctest: +SKIP
        ...     out = model.peft_model.generate(input_ids=ids)
        """
        return self.lora_adapters.merged(name)

    @property
    def decodes_merged(self) -> bool:
        """Whether `generate` decodes through the merged copy: ``decode_merged``, or when None on
        CUDA where the copy fits (`LoraAdapters.merged_copy_fits`: a 7B model on a 24 GB card would not)."""
        if self.decode_merged is None:
            return self.device.type == "cuda" and self.lora_adapters.merged_copy_fits("generate", self.device)
        return bool(self.decode_merged)

    @property
    def decodes_with_kernel(self) -> bool:
        """Whether `generate` routes decoding steps' linear layers to `rhea_kernels.decode_linear`:
        ``decode_kernel``, or when None on a CPU with fp32 weights where the C++ kernel is built."""
        from rhea_kernels.decode_linear import serves

        return serves(self.peft_model) if self.decode_kernel is None else bool(self.decode_kernel)

    def decoding(self):
        """The block `generate` decodes in: the decoding steps' linear layers routed to
        `rhea_kernels.decode_linears` where `decodes_with_kernel`, else nothing."""
        from rhea_kernels.decode_linear import decode_linears

        return decode_linears(self.peft_model) if self.decodes_with_kernel else contextlib.nullcontext()

    # ------------------------------------------------------------------ latent slots (rhea.modeling.projector)
    def embed_with_latents(self, input_ids: torch.Tensor, latent_embeds: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings of `input_ids` with each `<mem>` placeholder replaced, in order, by a latent row.

        `latent_embeds` is ``[R, hidden]`` or any ``[..., hidden]`` (flattened row-major); R must
        equal the number of placeholders in the whole batch, counted row by row.
        """
        return self._embed_latents(input_ids, latent_embeds)[0]

    def _embed_latents(self, input_ids: torch.Tensor, latent_embeds: torch.Tensor | None):
        return projector.embed_latents(self.base_model.get_input_embeddings(), input_ids, latent_embeds,
                                       mem_token_id=self.mem_token_id, latent_width=self.latent_width,
                                       n_mem=self.n_mem, injector=self.latent_injector)

    def _deep_latents(self, slots: torch.Tensor, rows: torch.Tensor | None, *, once: bool):
        if self.latent_injector is None or self.latent_injector.mode not in ("deep", "states"):
            return contextlib.nullcontext()
        return projector.deep_latents(self.decoder_layers(), self.latent_injector, slots, rows, once=once)

    # ------------------------------------------------------------------ compression
    def _tokenize_for_compression(self, texts: Sequence[str], chunk_tokens: int | None = None) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("compress() takes a list of strings; wrap a single text as [text]")
        ids = []
        limit = self.max_context
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, expected str")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:  # tokenizers would fail with a bare UnicodeEncodeError
                raise InvalidTextError(
                    f"texts[{i}] holds an unpaired surrogate {text[e.start]!r} at character {e.start} (a str decoded "
                    "with errors='surrogateescape'); decode the original bytes with their real encoding, or with "
                    "errors='replace'") from None
            # split_special_tokens: a literal "<mem>" (or "<|im_end|>") in a reply is plain text here.
            toks = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            if limit is not None and min(len(toks), chunk_tokens or len(toks)) + self.n_mem > limit:
                raise ValueError(
                    f"texts[{i}] has {len(toks)} tokens; with {self.n_mem} {MEM_TOKEN} slots that exceeds the "
                    f"model's context of {limit} tokens. Split the text and compress the parts separately."
                )
            ids.append(toks)
        return ids

    def compress(self, texts: Sequence[str], *, batch_size: int | None = None) -> torch.Tensor:
        """Compress each text into ``n_mem`` latent vectors with the compress adapter.

        Returns ``[len(texts), n_mem, hidden]``; differentiable (no ``torch.no_grad`` inside), so
        joint training backpropagates through it. Texts are left-padded per batch.
        """
        ids = self._tokenize_for_compression(texts)
        if not ids:
            return torch.zeros(0, self.n_mem, self.latent_width, dtype=self.dtype, device=self.device)
        return self._compress_batches(ids, batch_size)

    def compress_replies(self, texts: Sequence[str], *, chunk_tokens: int | None | str = "config",
                         batch_size: int | None = None) -> list[torch.Tensor]:
        """Each text's latents as the policy stores them: a list of ``[rows, latent_width]``, one per text.

        With ``chunk_tokens`` None (the default when ``RheaConfig.compress_chunk_tokens`` is None) a text is one
        block of ``n_mem`` rows, ``list(compress(texts))``. With ``chunk_tokens = c`` its tokens are cut into
        consecutive pieces of at most ``c`` and every piece is compressed alone into ``n_mem`` latents (ICAE's
        use of a compressor on text longer than it was trained on): ``ceil(tokens / c) * n_mem`` rows, the pieces'
        blocks in reading order (an empty text is one block). With ``RheaConfig.compress_piece_embeddings`` the
        read-out queries of piece i carry a learned offset for its index, so the blocks also say where their piece
        sits (`resize_piece_embeddings`). All pieces of all texts are compressed in batches
        of `batch_size` (default: all at once). Differentiable, as :meth:`compress`.

        >>> [x.shape[0] for x in model.compress_replies(["short", "a much longer reply ..."], chunk_tokens=48)]  # doctest: +SKIP
        [8, 24]
        """
        if chunk_tokens == "config":
            chunk_tokens = self.config.compress_chunk_tokens
        if chunk_tokens is None:
            return list(self.compress(texts, batch_size=batch_size))
        if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1:
            raise RheaConfigError(f"chunk_tokens={chunk_tokens!r} must be None (whole texts) or an int >= 1")
        ids = self._tokenize_for_compression(texts, chunk_tokens)
        pieces = [[t[i:i + chunk_tokens] for i in range(0, len(t), chunk_tokens)] or [[]] for t in ids]
        flat = [p for ps in pieces for p in ps]
        if not flat:
            return []
        index = [i for ps in pieces for i in range(len(ps))]
        blocks = self._compress_batches(flat, batch_size, index)
        out, at = [], 0
        for ps in pieces:
            out.append(blocks[at:at + len(ps)].reshape(len(ps) * self.n_mem, -1))
            at += len(ps)
        return out

    def _compress_batches(self, ids: list[list[int]], batch_size: int | None,
                          piece_index: list[int] | None = None) -> torch.Tensor:
        """``[len(ids), n_mem, latent_width]``: `_compress_ids` over batches of `batch_size` (default: all at once)."""
        step = batch_size or len(ids)
        return torch.cat([self._compress_ids(ids[i:i + step], None if piece_index is None else piece_index[i:i + step])
                          for i in range(0, len(ids), step)], dim=0)

    def _compress_ids(self, ids: list[list[int]], piece_index: list[int] | None = None) -> torch.Tensor:
        """One left-padded compress pass. With piece offsets (``mem_piece_embeds``) row j's slots get offset
        ``piece_index[j]`` (clamped to the last; None: offset 0, a whole text being its own first piece)."""
        n, pad = self.n_mem, self.tokenizer.pad_token_id
        width = max(len(t) for t in ids) + n
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long, device=self.device)
        attention_mask = torch.zeros((len(ids), width), dtype=torch.long, device=self.device)
        for row, toks in enumerate(ids):
            seq = toks + [self.mem_token_id] * n
            input_ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            attention_mask[row, width - len(seq):] = 1
        text_embeds = self.base_model.get_input_embeddings()(input_ids[:, :-n])
        slots = self.mem_slot_embeds.to(text_embeds.dtype).unsqueeze(0).expand(len(ids), -1, -1)
        if self.mem_piece_embeds is not None:
            at = torch.tensor(piece_index or [0] * len(ids), device=self.device).clamp(max=self.mem_piece_embeds.shape[0] - 1)
            slots = slots + self.mem_piece_embeds.to(text_embeds.dtype)[at].unsqueeze(1)
        embeds = torch.cat([text_embeds, slots], dim=1)
        states = self.decoder_layers() if self.config.latent_injection == "states" else None
        with self.adapter("compress"), projector.record_slot_states(states, n) as per_layer:
            # The decoder alone: no lm_head over the vocabulary, which compression never needs.
            hidden = self.base_model.get_decoder()(
                inputs_embeds=embeds,
                attention_mask=attention_mask,
                position_ids=positions_from_mask(attention_mask),
                use_cache=False,
            ).last_hidden_state
        final = hidden[:, -n:, :]
        return torch.cat([final] + per_layer, dim=-1) if per_layer else final

    # ------------------------------------------------------------------ generate side
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        latent_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        prefix_len: torch.Tensor | None = None,
        **kwargs,
    ):
        """Causal-LM forward with the generate adapter; `<mem>` placeholders take `latent_embeds`.

        `prefix_len` (``[batch]``: index just past each row's instruction block, counted from
        position 0 of the padded row, as `render_batch` returns it) is used by the anchored
        attention when ``config.anchor_bias > 0``.
        Returns the base model's ``CausalLMOutputWithPast``.
        """
        deep = contextlib.nullcontext()
        if inputs_embeds is None:
            if input_ids is None:
                raise ValueError("forward() needs input_ids (with <mem> placeholders) or inputs_embeds")
            inputs_embeds, slots, rows = self._embed_latents(input_ids, latent_embeds)
            projector.check_hooks_survive_recompute(self.base_model, self.latent_injector, self.training)
            deep = self._deep_latents(slots, rows, once=False)
        elif latent_embeds is not None:
            raise ValueError("pass latent_embeds with input_ids, not with inputs_embeds (they would be ignored)")
        if position_ids is None and attention_mask is not None:
            # the mask covers the cached tokens too when a cache (`cache`, or `past_key_values` before
            # transformers 5) is passed: the new tokens' positions are its last ones
            position_ids = positions_from_mask(attention_mask)[:, -inputs_embeds.shape[1]:]
        kwargs.update(self._anchor_kwargs(prefix_len, attention_mask, inputs_embeds.shape[0]))
        with self.adapter("generate"), deep:
            return self.peft_model(
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                labels=labels,
                **kwargs,
            )

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        latent_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        prefix_len: torch.Tensor | None = None,
        **generate_kwargs,
    ) -> torch.Tensor:
        """Generate with the generate adapter; latents fill the placeholders on the prefill step.

        On CUDA (``model.decode_merged`` None, the default) or with ``decode_merged = True`` the
        adapter is folded into cached weights for the call (`merged`): the same tokens, at the
        base model's cost per token. On a CPU (``model.decode_kernel``) the decoding steps' linear
        layers run `rhea_kernels.decode_linear` (`decoding`). Returns ``input_ids`` followed by the new tokens, like ``transformers``' ``generate``.
        `<mem>` is never generated. Left padding is supported (pass `attention_mask`).
        """
        inputs_embeds, slots, rows = self._embed_latents(input_ids, latent_embeds)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        suppress = list(generate_kwargs.pop("suppress_tokens", None) or [])
        generate_kwargs["suppress_tokens"] = sorted(set(suppress) | {self.mem_token_id})
        generate_kwargs.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        if generate_kwargs.get("max_new_tokens") is None and generate_kwargs.get("max_length") is None:
            generate_kwargs["max_new_tokens"] = 256
        anchor = self._anchor_kwargs(prefix_len, attention_mask, input_ids.shape[0])
        # inside `disable_adapters` (the baselines' path) the base model decodes: nothing to merge
        merged = self.merged("generate") if self.decodes_merged and not self.lora_adapters.disabled() \
            else contextlib.nullcontext()
        with self.adapter("generate"), merged, self.decoding(), projector.forward_kwargs(self.base_model, anchor), \
                self._deep_latents(slots, rows, once=True):
            return self.peft_model.generate(
                input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **generate_kwargs
            )

    # ------------------------------------------------------------------ anchored attention
    def _apply_anchor_config(self) -> None:
        """Switch the backbone to the prefix-anchored attention when ``anchor_bias > 0``."""
        if self.config.anchor_bias <= 0:
            return
        try:
            from rhea_kernels.hf import register_anchored_attention
        except ImportError as e:  # pragma: no cover - rhea_kernels ships with rhea
            raise RheaConfigError(f"anchor_bias={self.config.anchor_bias} needs rhea_kernels.hf ({e})") from e
        if not self.anchor_attention_registered:
            self._plain_attention = getattr(self.base_model.config, "_attn_implementation", None) or "sdpa"
        self.base_model.set_attn_implementation(register_anchored_attention())
        self.anchor_attention_registered = True

    def set_anchor_bias(self, beta: float) -> None:
        """Set ``config.anchor_bias`` to `beta` and the attention to match (0: the backbone's own back)."""
        self.config.anchor_bias = float(beta)
        self.config.validate()
        if beta > 0:
            self._apply_anchor_config()
        elif self.anchor_attention_registered:
            self.base_model.set_attn_implementation(self._plain_attention)
            self.anchor_attention_registered = False

    def _anchor_kwargs(self, prefix_len, attention_mask, batch: int) -> dict:
        if not self.anchor_attention_registered:
            return {}
        if prefix_len is None:
            prefix_len = torch.zeros(batch, dtype=torch.long, device=self.device)
        prefix_len = torch.as_tensor(prefix_len, dtype=torch.long, device=self.device).reshape(-1)
        if attention_mask is not None:
            # the hook counts prefix tokens from each row's first real token (left padding, or
            # a reused history cache's padding, comes before it)
            pad = attention_mask.long().argmax(-1).to(self.device)
            prefix_len = (prefix_len - pad).clamp(min=0)
        return {"rhea_prefix_len": prefix_len, "rhea_anchor_bias": float(self.config.anchor_bias)}
