"""`RheaForCausalLM`: one backbone, two named LoRA adapters, and `<mem>` latent slots.

* ``compress(texts)`` runs the backbone with the **compress** adapter on ``text + <mem>×n`` and
  reads the final hidden states at the n slots: one ``[n, hidden]`` latent block per text.
* ``forward``/``generate`` run the **generate** adapter on ``input_ids`` in which ``<mem>``
  placeholders (n per latent block) have their embeddings replaced, in order, by supplied
  latent vectors -- the LLaVA convention for image features.

Both adapters live on the same PEFT model; :meth:`RheaForCausalLM.adapter` switches the active
one without freezing the other (PEFT's ``set_adapter`` would), so one graph can train both.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from rhea.constants import MEM_TOKEN
from rhea.errors import CheckpointError, InvalidTextError, LatentMismatchError, RheaConfigError
from rhea.modeling.config import CONFIG_NAME, RheaConfig
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME, ScoreHead

ADAPTERS = ("compress", "generate")
MEM_WEIGHTS_NAME = "mem_tokens.safetensors"
INJECTOR_WEIGHTS_NAME = "latent_injector.safetensors"
TOKENIZER_DIR = "tokenizer"
#: rank of the per-layer correction of `latent_injection="deep"`
DEEP_RANK = 64


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding, so a padded row computes exactly as if unpadded."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


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


@contextlib.contextmanager
def _quiet_peft():
    """peft calls a transformers API that transformers deprecates; users can do nothing about it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _lora_config(config: RheaConfig):
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


class LatentInjector(nn.Module):
    """Maps compress-side latents (final hidden states) into the generate pass's embedding space.

    The final hidden states of a small LM carry a large component common to every position
    (norm ~40 of ~50 on SmolLM2-135M, against token embeddings of norm ~3.2), so raw latents
    enter the generate pass as one shared direction at an off-scale norm
    (shared/design/FINDINGS.md). ``"norm"`` subtracts a learned centre and rescales each slot to
    the mean token-embedding norm; ``"projector"`` then applies a learned linear map
    (identity-initialised, as LLaVA/xRAG project into the embedding space).

    >>> inj = LatentInjector(4, "projector", target_norm=2.0)
    >>> out = inj(torch.tensor([[3.0, 0.0, 0.0, 4.0]]))
    >>> [round(float(v), 3) for v in out[0]], round(float(out.norm()), 3)
    ([1.2, 0.0, 0.0, 1.6], 2.0)
    """

    def __init__(self, hidden: int, mode: str, target_norm: float, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, n_layers: int = 0, rank: int = DEEP_RANK):
        super().__init__()
        if mode not in ("norm", "projector", "deep", "states"):
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


def _embedding_norm(base: nn.Module, vocab: int | None) -> float:
    weight = base.get_input_embeddings().weight
    rows = weight[:vocab] if vocab else weight
    return float(rows.detach().float().norm(dim=-1).mean())


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
        # How latents enter the generate pass (None = raw hidden states, the pre-option behaviour).
        self.latent_injector = None
        if config.latent_injection != "raw":
            self.latent_injector = LatentInjector(hidden, config.latent_injection,
                                                  _embedding_norm(self.base_model, config.base_vocab_size),
                                                  dtype=self.dtype, device=self.device,
                                                  n_layers=len(self._decoder_layers()) if config.latent_injection == "deep" else 0)
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
        self._merged_cache: dict[str, tuple[tuple, list]] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_base(cls, base: nn.Module, tokenizer, config: RheaConfig | None = None) -> "RheaForCausalLM":
        """Wrap a plain HF causal LM with fresh (untrained) compress and generate adapters."""
        from peft import get_peft_model

        config = RheaConfig.from_dict(config.to_dict()) if config is not None else RheaConfig()
        text_cfg = _text_config(base.config)
        config.base_model = config.base_model or getattr(base.config, "_name_or_path", None) or None
        config.base_hidden_size = int(text_cfg.hidden_size)
        config.base_vocab_size = int(base.get_input_embeddings().weight.shape[0])
        config.extra.setdefault("adapters_trained", False)
        mem_id = add_mem_token(base, tokenizer)
        with _quiet_peft():
            peft_model = get_peft_model(base, _lora_config(config), adapter_name="compress")
            peft_model.add_adapter("generate", _lora_config(config))
        model = cls(peft_model, tokenizer, config, mem_id)
        with torch.no_grad():
            vocab = base.get_input_embeddings().weight[: config.base_vocab_size]
            model.mem_slot_embeds.copy_(vocab.float().mean(0).to(model.mem_slot_embeds.dtype).expand_as(model.mem_slot_embeds))
        model._apply_anchor_config()
        return model

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        base_model: str | nn.Module | None = None,
        *,
        dtype: torch.dtype = torch.float32,
    ) -> "RheaForCausalLM":
        """Load a directory written by :meth:`save_pretrained`.

        `base_model` overrides the base recorded in ``rhea_config.json``: a model-zoo name, a
        path or hub id already on disk, or an already-loaded ``PreTrainedModel``.
        """
        from peft import PeftModel
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        from rhea.modeling.zoo import load_base_model

        directory = Path(directory)
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is not a directory; pass the folder written by save_pretrained()")
        config = RheaConfig.load(directory)
        required = [CONFIG_NAME, MEM_WEIGHTS_NAME, TOKENIZER_DIR, *(f"{a}/adapter_config.json" for a in ADAPTERS)]
        missing = [r for r in required if not (directory / r).exists()]
        if missing:
            raise CheckpointError(f"{directory} is missing {missing}; it was not fully written by save_pretrained()")

        if base_model is None:
            if not config.base_model:
                raise CheckpointError(f"{directory / CONFIG_NAME} records no base_model; pass base_model=")
            base_model = config.base_model
        if isinstance(base_model, (str, os.PathLike)):
            base, _ = load_base_model(str(base_model), dtype=dtype)
        else:
            base = base_model
        text_cfg = _text_config(base.config)
        if config.base_hidden_size is not None and int(text_cfg.hidden_size) != config.base_hidden_size:
            raise CheckpointError(
                f"base model has hidden size {text_cfg.hidden_size}, but {directory} was saved for hidden size "
                f"{config.base_hidden_size} (base {config.base_model!r}); load it onto that base model"
            )
        rows = int(base.get_input_embeddings().weight.shape[0])
        # rows == vocab + 1: a base that already carries the <mem> row (e.g. an exported merge)
        if config.base_vocab_size is not None and rows not in (config.base_vocab_size, config.base_vocab_size + 1):
            raise CheckpointError(
                f"base model has {rows} embedding rows, but {directory} was saved for a vocabulary of "
                f"{config.base_vocab_size} (base {config.base_model!r}); load it onto that base model"
            )
        tokenizer = AutoTokenizer.from_pretrained(directory / TOKENIZER_DIR)
        mem_id = add_mem_token(base, tokenizer)
        try:
            mem = load_file(str(directory / MEM_WEIGHTS_NAME))
        except Exception as e:  # safetensors raises its own error type on corrupt headers
            raise CheckpointError(f"{directory / MEM_WEIGHTS_NAME} is corrupted or unreadable ({e})") from e
        hidden = int(text_cfg.hidden_size)
        expected = {"mem_slot_embeds": (config.n_mem, hidden), "mem_token_row": (hidden,)}
        if config.compress_piece_embeddings:
            expected["mem_piece_embeds"] = (config.compress_piece_embeddings, hidden)
        for key, shape in expected.items():
            if key not in mem or tuple(mem[key].shape) != shape:
                got = tuple(mem[key].shape) if key in mem else "missing"
                raise CheckpointError(f"{directory / MEM_WEIGHTS_NAME}: {key} should have shape {shape}, got {got}")
        if set(mem) - set(expected):
            raise CheckpointError(f"{directory / MEM_WEIGHTS_NAME} holds {sorted(set(mem) - set(expected))}, which "
                                  f"{directory / CONFIG_NAME} does not describe (compress_piece_embeddings="
                                  f"{config.compress_piece_embeddings}); the two files come from different saves")
        with torch.no_grad():
            base.get_input_embeddings().weight[mem_id] = mem["mem_token_row"].to(base.dtype)
        peft_model = None
        for name in ADAPTERS:  # one at a time, so a bad file is reported with the adapter it belongs to
            try:
                with _quiet_peft():
                    if peft_model is None:
                        peft_model = PeftModel.from_pretrained(base, str(directory / name), adapter_name=name, is_trainable=True)
                    else:
                        peft_model.load_adapter(str(directory / name), adapter_name=name, is_trainable=True)
            except Exception as e:
                raise CheckpointError(
                    f"the {name!r} LoRA adapter in {directory / name} could not be loaded ({type(e).__name__}: {e}); "
                    f"that folder is corrupted or was not written by save_pretrained(): restore {directory / name} "
                    "from the directory you saved (or save the model again)"
                ) from e
        model = cls(peft_model, tokenizer, config, mem_id)
        with torch.no_grad():
            model.mem_slot_embeds.copy_(mem["mem_slot_embeds"].to(model.mem_slot_embeds.dtype))
            if model.mem_piece_embeds is not None:
                model.mem_piece_embeds.copy_(mem["mem_piece_embeds"].to(model.mem_piece_embeds.dtype))
        if model.latent_injector is not None:
            path = directory / INJECTOR_WEIGHTS_NAME
            if not path.is_file():
                raise CheckpointError(f"{directory / CONFIG_NAME} sets latent_injection={config.latent_injection!r} "
                                      f"but {path.name} is missing; it was not fully written by save_pretrained()")
            try:
                state = load_file(str(path))
            except Exception as e:
                raise CheckpointError(f"{path} is corrupted or unreadable ({e})") from e
            expected = model.latent_injector.state_dict()
            bad = sorted(k for k in expected if k not in state or tuple(state[k].shape) != tuple(expected[k].shape))
            if bad or set(state) - set(expected):
                raise CheckpointError(f"{path}: tensors {bad or sorted(set(state) - set(expected))} do not match "
                                      f"latent_injection={config.latent_injection!r} at hidden size {model.hidden_size}")
            with torch.no_grad():
                model.latent_injector.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})
        if model.score_head is not None:
            model.load_score_head(directory / SCORE_HEAD_WEIGHTS_NAME)
        model._apply_anchor_config()
        return model.eval()

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``rhea_config.json``, ``mem_tokens.safetensors``, ``tokenizer/``, ``compress/``, ``generate/``
        and a model card (``README.md``, `rhea.modeling.card`).

        The base model's weights are not copied: ``rhea_config.json`` names the base.
        """
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.save(directory)
        mem = {
            "mem_slot_embeds": self.mem_slot_embeds.detach().cpu().contiguous(),
            "mem_token_row": self.base_model.get_input_embeddings().weight[self.mem_token_id].detach().cpu().contiguous(),
        }
        if self.mem_piece_embeds is not None:
            mem["mem_piece_embeds"] = self.mem_piece_embeds.detach().cpu().contiguous()
        save_file(
            mem,
            str(directory / MEM_WEIGHTS_NAME),
            metadata={"mem_token": MEM_TOKEN, "mem_token_id": str(self.mem_token_id)},
        )
        if self.latent_injector is not None:
            save_file(self.latent_injector.state(), str(directory / INJECTOR_WEIGHTS_NAME),
                      metadata={"latent_injection": self.config.latent_injection})
        if self.score_head is not None:
            save_file(self.score_head.state(), str(directory / SCORE_HEAD_WEIGHTS_NAME),
                      metadata={"score_head": str(self.config.score_head),
                                "score_head_layers": ",".join(map(str, self.config.score_head_layers))})
        elif (directory / SCORE_HEAD_WEIGHTS_NAME).exists():
            (directory / SCORE_HEAD_WEIGHTS_NAME).unlink()   # a head from an earlier save would no longer be described
        self.tokenizer.save_pretrained(directory / TOKENIZER_DIR)
        # Non-default adapter names go to subfolders; the <mem> rows are ours, never PEFT's
        # (save_embedding_layers="auto" could write the whole resized embedding matrix).
        self.peft_model.save_pretrained(str(directory), save_embedding_layers=False)
        # PEFT leaves its template card ("More Information Needed"); the directory gets a card that describes it.
        from rhea.modeling.card import write_model_card

        write_model_card(directory)

    # ------------------------------------------------------------------ properties
    @property
    def base_model(self) -> nn.Module:
        """The underlying Hugging Face model (with LoRA layers injected)."""
        return self.peft_model.get_base_model()

    @property
    def hidden_size(self) -> int:
        return int(_text_config(self.base_model.config).hidden_size)

    @property
    def dtype(self) -> torch.dtype:
        return self.base_model.get_input_embeddings().weight.dtype

    @property
    def device(self) -> torch.device:
        return self.base_model.get_input_embeddings().weight.device

    @property
    def n_mem(self) -> int:
        return self.config.n_mem

    def resize_mem_slots(self, n_mem: int) -> None:
        """Change the number of `<mem>` read-out slots of a (trained) model: a capacity warm start.

        Slot ``i < min(old, new)`` keeps its trained embedding; a new slot ``i >= old`` starts as a copy
        of slot ``i mod old`` (the compress pass reads it at another position, so its state differs from
        the original's at once), which keeps a trained compressor's read-out instead of starting the
        new slots from scratch. Latents compressed before the resize have the old slot count and no
        longer fit; the recorded ``fidelity`` is cleared (it was measured on the old slots) and the
        thresholds should be re-calibrated (``rhea calibrate``).

        >>> model.resize_mem_slots(16)                                # doctest: +SKIP
        >>> model.compress(["a reply"]).shape[1]                      # doctest: +SKIP
        16
        """
        config = dataclasses.replace(self.config, n_mem=n_mem, fidelity=None)  # RheaConfig validates n_mem
        old = self.n_mem
        if n_mem == old:
            return
        rows = self.mem_slot_embeds.detach()[torch.arange(n_mem, device=self.device) % old].clone()
        self.mem_slot_embeds = nn.Parameter(rows, requires_grad=self.mem_slot_embeds.requires_grad)
        self.config = config

    def resize_piece_embeddings(self, n: int) -> None:
        """Give the compressor `n` piece-index offsets (``RheaConfig.compress_piece_embeddings``): a warm start
        that leaves what the model computes unchanged. Offset ``i`` below the old count keeps its trained value;
        a new one starts as a copy of the old last offset (which piece ``i`` used before), or zero when there was
        none, so every piece is compressed exactly as before until training moves them. Shrinking drops the
        offsets of the last piece indices (their pieces then use offset ``n - 1``); ``n = 0`` removes them.

        >>> model.resize_piece_embeddings(8)                          # doctest: +SKIP
        """
        config = dataclasses.replace(self.config, compress_piece_embeddings=n)  # RheaConfig validates n
        old = self.mem_piece_embeds
        if n == (0 if old is None else old.shape[0]):
            return
        if n == 0:
            self.mem_piece_embeds = None
        else:
            rows = torch.zeros(n, self.hidden_size, dtype=self.dtype, device=self.device)
            if old is not None:
                keep = min(n, old.shape[0])
                rows[:keep] = old.detach()[:keep]
                rows[keep:] = old.detach()[-1]
            self.mem_piece_embeds = nn.Parameter(rows, requires_grad=self.mem_slot_embeds.requires_grad)
        self.config = config

    def lora_rank(self, adapter: str) -> int:
        """The LoRA rank of `adapter` ("compress" or "generate") as its PEFT config records it."""
        if adapter not in ADAPTERS:
            raise RheaConfigError(f"adapter {adapter!r} is not one of {ADAPTERS}")
        return int(self.peft_model.peft_config[adapter].r)

    def _rank_change(self, adapter: str, r: int, *, grow: bool) -> tuple[int, list]:
        """Check a rank change of `adapter` to `r` (`grow`: up, else down); return the old rank and its LoRA layers."""
        from peft.tuners.lora import LoraLayer

        old = self.lora_rank(adapter)
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise RheaConfigError(f"rank {r!r} must be an int >= 1")
        if grow and r < old:
            raise RheaConfigError(f"the {adapter!r} adapter has rank {old}; resize_lora_rank only grows a rank "
                                  f"(shrinking to {r} would drop trained directions; shrink_lora_rank does): pass r >= {old}")
        if not grow and r > old:
            raise RheaConfigError(f"the {adapter!r} adapter has rank {old}; shrink_lora_rank only lowers a rank: "
                                  f"pass r <= {old} (resize_lora_rank grows one)")
        cfg = self.peft_model.peft_config[adapter]
        if getattr(cfg, "rank_pattern", None) or getattr(cfg, "alpha_pattern", None):
            raise RheaConfigError(f"the {adapter!r} adapter sets rank_pattern/alpha_pattern; per-layer ranks are not "
                                  "changed here")
        layers = [m for m in self.peft_model.modules() if isinstance(m, LoraLayer) and adapter in m.r]
        for layer in layers:
            if adapter not in layer.lora_A or getattr(layer, "merged", False):
                raise RheaConfigError(f"{type(layer).__name__} holds the {adapter!r} adapter merged or outside "
                                      "lora_A/lora_B (e.g. an embedding LoRA); unmerge it before changing its rank")
        return old, layers

    @staticmethod
    def _set_layer_rank(layer, adapter: str, r: int) -> None:
        """Record rank `r` on one LoRA layer with its scale ``alpha / r`` (``alpha / sqrt(r)`` under rsLoRA) kept."""
        layer.r[adapter] = r
        layer.lora_alpha[adapter] = layer.scaling[adapter] * (math.sqrt(r) if layer.use_rslora.get(adapter) else r)

    def _set_config_rank(self, adapter: str, old: int, r: int) -> None:
        """Record rank `r` in the adapter's PEFT config, alpha following it so the scale is kept (saved with it)."""
        cfg = self.peft_model.peft_config[adapter]
        alpha = (cfg.lora_alpha / old) * r if not cfg.use_rslora else cfg.lora_alpha * math.sqrt(r / old)
        cfg.r, cfg.lora_alpha = r, int(alpha) if float(alpha).is_integer() else alpha

    def resize_lora_rank(self, adapter: str, r: int, *, seed: int = 0) -> None:
        """Grow the LoRA rank of `adapter` to `r` without changing what the model computes: a capacity warm start.

        Every LoRA layer of the adapter keeps its trained ``A`` rows and ``B`` columns; the new ``A`` rows are
        drawn as PEFT draws a fresh ``A`` (Kaiming-uniform) and the new ``B`` columns are zero, so ``B A`` is
        unchanged. ``lora_alpha`` is raised with the rank so that the scale ``alpha / r`` (``alpha / sqrt(r)``
        under rsLoRA) stays what the adapter was trained with. The adapter's PEFT config records the new rank
        and alpha, so ``save_pretrained`` / ``from_pretrained`` round-trip it (``RheaConfig.lora_r`` stays the
        rank both adapters were created with). Build the optimizer after resizing: the LoRA tensors are new.

        >>> model.resize_lora_rank("compress", 64)                   # doctest: +SKIP
        >>> model.lora_rank("compress")                               # doctest: +SKIP
        64
        """
        old, layers = self._rank_change(adapter, r, grow=True)
        if r == old:
            return
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in layers:
                a_old, b_old = layer.lora_A[adapter], layer.lora_B[adapter]
                a = nn.Linear(a_old.in_features, r, bias=False)
                nn.init.kaiming_uniform_(a.weight, a=math.sqrt(5), generator=g)  # PEFT's default init of A
                a.weight[:old] = a_old.weight.float()
                b = nn.Linear(r, b_old.out_features, bias=b_old.bias is not None)
                b.weight.zero_()
                b.weight[:, :old] = b_old.weight.float()
                if b_old.bias is not None:
                    b.bias.copy_(b_old.bias.float())
                for new, was in ((a, a_old), (b, b_old)):
                    new.to(device=was.weight.device, dtype=was.weight.dtype)
                    new.requires_grad_(was.weight.requires_grad)
                layer.lora_A[adapter], layer.lora_B[adapter] = a, b
                self._set_layer_rank(layer, adapter, r)
        self._set_config_rank(adapter, old, r)

    def shrink_lora_rank(self, adapter: str, r: int, *, seed: int = 0) -> dict:
        """Cut the LoRA rank of `adapter` to `r` by a truncated SVD of each layer's update: the smallest file.

        Each LoRA layer's update ``scale * B A`` is replaced by its best rank-`r` approximation (Eckart-Young):
        the top `r` singular directions, split evenly between the new ``B`` and ``A``. The scale ``alpha / r`` is
        kept (``lora_alpha`` is lowered with the rank), so a layer whose update already had rank <= `r` computes
        exactly what it did. An update with fewer than `r` non-zero singular values (a zero, untrained adapter
        included) keeps PEFT's fresh-start shape in the spare directions: Kaiming ``A`` rows, zero ``B``
        columns, so the adapter can still be trained afterwards. Returns what was kept: the share of each
        layer's squared Frobenius norm (``energy_kept_min`` / ``_mean`` over layers, 1.0 for a zero update)
        and the largest relative error ``||dW - dW_r|| / ||dW||``. The inverse of :meth:`resize_lora_rank`;
        measure the shrunk model (``benchmarks/reconstruction.py``) before shipping it.

        >>> model.shrink_lora_rank("compress", 16)                   # doctest: +SKIP
        {'rank_before': 64, 'rank_after': 16, 'layers': 210, 'energy_kept_min': 0.996, ...}
        """
        old, layers = self._rank_change(adapter, r, grow=False)
        if getattr(self.peft_model.peft_config[adapter], "use_dora", False):
            raise RheaConfigError(f"the {adapter!r} adapter uses DoRA, whose magnitude vector depends on the update's "
                                  "column norms; a truncated B A would no longer match it")
        if any(layer.lora_B[adapter].bias is not None for layer in layers):
            raise RheaConfigError(f"the {adapter!r} adapter has a lora_B bias (lora_bias=True); it is not shrunk here")
        kept, errors = [], []
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in layers:
                a_old, b_old = layer.lora_A[adapter], layer.lora_B[adapter]
                a, b = a_old.weight.detach().double().cpu(), b_old.weight.detach().double().cpu()
                # B A = Qb (Rb Ra^T) Qa^T: the SVD of the small old x old core gives the update's SVD.
                qb, rb = torch.linalg.qr(b)
                qa, ra = torch.linalg.qr(a.T)
                u, s, vh = torch.linalg.svd(rb @ ra.T, full_matrices=False)
                total = float((s * s).sum())
                tail = float((s[r:] * s[r:]).sum())
                kept.append(1.0 if total == 0.0 else 1.0 - tail / total)
                errors.append(0.0 if total == 0.0 else math.sqrt(tail / total))
                k = min(r, s.shape[0])                               # a layer narrower than r has fewer directions
                root = torch.sqrt(s[:k])                             # B' A' = U_k S_k V_k^T = B A, truncated;
                new_b = (qb @ u[:, :k]) * root                       # the scale alpha / r is kept as it was
                new_a = root[:, None] * (vh[:k] @ qa.T)
                a_new = nn.Linear(a_old.in_features, r, bias=False)
                nn.init.kaiming_uniform_(a_new.weight, a=math.sqrt(5), generator=g)
                b_new = nn.Linear(r, b_old.out_features, bias=False)
                b_new.weight.zero_()
                live = torch.nonzero(s[:k] > 0).flatten()
                a_new.weight[live] = new_a[live].to(a_new.weight.dtype)
                b_new.weight[:, live] = new_b[:, live].to(b_new.weight.dtype)
                for new, was in ((a_new, a_old), (b_new, b_old)):
                    new.to(device=was.weight.device, dtype=was.weight.dtype)
                    new.requires_grad_(was.weight.requires_grad)
                layer.lora_A[adapter], layer.lora_B[adapter] = a_new, b_new
                self._set_layer_rank(layer, adapter, r)
        self._set_config_rank(adapter, old, r)
        return {"adapter": adapter, "rank_before": old, "rank_after": r, "layers": len(layers),
                "energy_kept_min": min(kept, default=1.0),
                "energy_kept_mean": sum(kept) / len(kept) if kept else 1.0,
                "rel_error_max": max(errors, default=0.0)}

    @property
    def latent_width(self) -> int:
        """Width of one latent vector: ``hidden``, or ``n_layers * hidden`` under ``latent_injection="states"``
        (the final states first, then the slot's state at the input of decoder layers 1 .. n_layers-1)."""
        if self.config.latent_injection == "states":
            return self.hidden_size * len(self._decoder_layers())
        return self.hidden_size

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
        from safetensors.torch import load_file

        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"rhea_config.json sets score_head={self.config.score_head} but {path} is missing; "
                                  "copy it from the directory the head was trained into, or set score_head to 0")
        try:
            state = load_file(str(path))
        except Exception as e:
            raise CheckpointError(f"{path} is corrupted or unreadable ({e})") from e
        expected = self.score_head.proj.state_dict()
        bad = sorted(k for k in expected if k not in state or tuple(state[k].shape) != tuple(expected[k].shape))
        if bad or set(state) - set(expected):
            raise CheckpointError(f"{path}: tensors {bad or sorted(set(state) - set(expected))} do not match score_head="
                                  f"{self.config.score_head} over blocks {self.config.score_head_layers} of hidden "
                                  f"{self.hidden_size}")
        with torch.no_grad():
            self.score_head.proj.load_state_dict({k: v.float() for k, v in state.items()})

    def score_view(self, latents: torch.Tensor) -> torch.Tensor:
        """What retrieval scores of `latents` (``[..., latent_width]``): the trained `ScoreHead`'s output when the
        config has one (``RheaConfig.score_head``), else the final hidden states (contiguous, as the turn-scoring
        kernels read them)."""
        if self.score_head is not None:
            return self.score_head(latents)
        if latents.shape[-1] == self.hidden_size:
            return latents
        return latents[..., : self.hidden_size].contiguous()

    @property
    def max_context(self) -> int | None:
        return getattr(_text_config(self.base_model.config), "max_position_embeddings", None)

    @property
    def adapters_trained(self) -> bool:
        return bool(self.config.extra.get("adapters_trained", False))

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        """Both adapters' LoRA weights, the `<mem>` slot embeddings and the latent injector (if any)."""
        return (p for p in self.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ adapters
    @contextlib.contextmanager
    def adapter(self, name: str):
        """Make `name` the active adapter inside the block, leaving every ``requires_grad`` as it was.

        A switch sets each LoRA layer's active adapter from a cached list of the layers (well under
        a millisecond on SmolLM2-135M) rather than through PEFT's ``set_adapter``, which stays the
        path for ``modules_to_save`` wrappers or merged layers (`_switch_adapter`).

        >>> with model.adapter("compress"):    # doctest: +SKIP
        ...     out = model.peft_model(input_ids)
        """
        if name not in ADAPTERS:
            raise ValueError(f"adapter {name!r} is not one of {ADAPTERS}")
        prev = self.active_adapter_name
        if prev == name:
            yield
            return
        self._switch_adapter(name)
        try:
            yield
        finally:
            self._switch_adapter(prev)

    def _switch_adapter(self, to: str) -> None:
        """Point every LoRA layer at adapter `to`, leaving ``requires_grad`` alone.

        PEFT's ``set_adapter`` walks every module and resets every adapter parameter's
        ``requires_grad`` (freezing the other adapter, which joint training must then undo): 55 ms
        of CPU per round trip on SmolLM2-135M, paid twice per joint step and per compress call. What
        decides which adapter a LoRA layer runs is its ``_active_adapter`` (as
        `rhea.training.recompute` pins it), so the layers are found once and only that is set. A
        model with PEFT auxiliary modules (``modules_to_save``) or merged layers takes PEFT's path.
        """
        layers = self._tuner_layers()
        if layers is None:
            grads = {n: p.requires_grad for n, p in self.peft_model.named_parameters() if "lora_" in n}
            self.peft_model.base_model.set_adapter(to)
            params = dict(self.peft_model.named_parameters())
            for n, flag in grads.items():  # set_adapter froze the other adapter: undo that
                params[n].requires_grad_(flag)
            return
        for layer in layers:
            layer._active_adapter = [to]
        self.peft_model.base_model.active_adapter = to

    def _tuner_layers(self) -> list | None:
        """The PEFT tuner layers to switch by hand, or None where PEFT's ``set_adapter`` must run."""
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper

        cached = getattr(self, "_tuner_layer_cache", None)
        if cached is None or cached[0] is not self.peft_model:
            modules = list(self.peft_model.modules())
            if any(isinstance(m, AuxiliaryTrainingWrapper) for m in modules):
                layers = None
            else:
                layers = [m for m in modules if isinstance(m, BaseTunerLayer)]
            cached = (self.peft_model, layers)
            self._tuner_layer_cache = cached
        layers = cached[1]
        if layers is not None and any(layer.merged for layer in layers):
            return None
        return layers

    @property
    def active_adapter_name(self) -> str:
        """The LoRA adapter the LoRA layers run now ("compress" or "generate").

        Read from the LoRA model: ``PeftModel.active_adapter`` keeps its own record, which
        `adapter` does not update (it sets the LoRA model's and each layer's, directly or through
        the LoRA model's ``set_adapter``).
        """
        active = self.peft_model.base_model.active_adapter
        return active[0] if isinstance(active, (list, tuple)) and len(active) == 1 else active

    def disable_adapters(self):
        """Context manager: run the plain base model (no LoRA), e.g. for the recognizer's classifier."""
        return self.peft_model.disable_adapter()

    def _lora_layers(self, name: str) -> list:
        """Adapter `name`'s LoRA layers, checked foldable; found once per PEFT model (walking the
        module tree took ~10 ms per call on SmolLM2, paid by every merged reply)."""
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        cache = getattr(self, "_lora_layer_cache", None)
        if cache is None or cache[0] is not self.peft_model:
            cache = self._lora_layer_cache = (self.peft_model, {})
        if name in cache[1]:
            return cache[1][name]
        layers = [m for m in self.peft_model.modules() if isinstance(m, LoraLayer) and name in m.lora_A]
        odd = [type(m).__name__ for m in layers if not isinstance(m, LoraLinear) or m.use_dora.get(name, False)
               or not isinstance(getattr(m.get_base_layer(), "weight", None), nn.Parameter)
               or not m.get_base_layer().weight.dtype.is_floating_point]
        if odd:
            raise RheaConfigError(f"merged decoding folds plain LoRA into floating-point nn.Linear weights; the {name} "
                                  f"adapter also has {sorted(set(odd))} layers (DoRA, quantised or non-linear bases): "
                                  "set model.decode_merged = False")
        cache[1][name] = layers
        return layers

    def _merged_weights(self, name: str) -> tuple[list, list]:
        """(layers, their base weights with `name`'s LoRA added), rebuilt whenever an adapter or base weight changed."""
        layers = self._lora_layers(name)
        key = tuple((m.lora_A[name].weight._version, m.lora_A[name].weight.data_ptr(), m.lora_B[name].weight._version,
                     m.lora_B[name].weight.data_ptr(), m.scaling[name], m.get_base_layer().weight.data_ptr())
                    for m in layers)
        cached = self._merged_cache.get(name)
        if cached is None or cached[0] != key:
            self._merged_cache.pop(name, None)  # free the stale copy before making the new one
            with torch.no_grad():
                weights = [(m.get_base_layer().weight + m.get_delta_weight(name).to(m.get_base_layer().weight.dtype))
                           .detach() for m in layers]
            cached = self._merged_cache[name] = (key, weights)
        return layers, cached[1]

    def _adapters_disabled(self) -> bool:
        """True inside `disable_adapters` (PEFT flags every LoRA layer; the first generate layer tells)."""
        layers = self._lora_layers("generate")
        return bool(layers and getattr(layers[0], "disable_adapters", False))

    @property
    def decodes_merged(self) -> bool:
        """Whether `generate` decodes through the merged copy: ``decode_merged``, or when None on
        CUDA where the copy fits (`_merged_copy_fits`: a 7B model on a 24 GB card would not)."""
        if self.decode_merged is None:
            return self.device.type == "cuda" and self._merged_copy_fits("generate")
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

    #: the default (decode_merged None) builds the merged copy only while this share of the GPU's
    #: free memory stays free after it: the copy must not crowd out the KV cache
    MERGED_COPY_MAX_FREE_SHARE = 0.5

    def _merged_copy_fits(self, name: str) -> bool:
        """True when the merged copy of `name` exists or takes at most MERGED_COPY_MAX_FREE_SHARE of the
        device's free memory; else False, warned once (pass decode_merged=True to force it). False too
        for adapters that cannot be folded (the default never raises for them)."""
        if name in self._merged_cache:
            return True
        verdict = getattr(self, "_merged_fit_verdict", None)
        if verdict is not None:
            return verdict
        try:
            layers = self._lora_layers(name)
        except RheaConfigError:  # DoRA / quantised bases: nothing to fold, the default just decodes unmerged
            self._merged_fit_verdict = False
            return False
        need = sum(m.get_base_layer().weight.numel() * m.get_base_layer().weight.element_size() for m in layers)
        free, _ = torch.cuda.mem_get_info(self.device)
        fits = need <= self.MERGED_COPY_MAX_FREE_SHARE * free
        if not fits:
            warnings.warn(f"merged decoding off: the merged copy of the {name} adapter needs {need / 2**30:.1f} GiB and "
                          f"the GPU has {free / 2**30:.1f} GiB free; decoding runs the LoRA branches (about 2x per "
                          "token on an H100). Set model.decode_merged = True to build it anyway.", RuntimeWarning,
                          stacklevel=3)
        self._merged_fit_verdict = fits
        return fits

    @contextlib.contextmanager
    def merged(self, name: str = "generate"):
        """Run inside the block with adapter `name` folded into the base weights and no LoRA branch.

        The outputs equal running the adapter (up to float rounding of W + BA), at the base
        model's cost per token: each LoRA layer runs one matmul instead of three plus the
        adapter bookkeeping. The merged weights are computed once and cached (one extra copy of
        the adapted layers' weights), rebuilt when the adapter or base weights change (e.g.
        after an optimizer step), and swapped in and out by reference, so the base weights are
        never modified and the other adapter (compress) is unaffected. Inference only.

        >>> with model.merged("generate"):      # doctest: +SKIP
        ...     out = model.peft_model.generate(input_ids=ids)
        """
        if name not in ADAPTERS:
            raise ValueError(f"adapter {name!r} is not one of {ADAPTERS}")
        layers, weights = self._merged_weights(name)
        bases = [m.get_base_layer() for m in layers]
        originals = [b.weight.data for b in bases]
        slots = self._lora_slots(layers)
        try:
            for b, w in zip(bases, weights):
                b.weight.data = w
            # The LoRA wrappers leave the graph for the block: each parent holds its plain base
            # nn.Linear (merged weight), so a decoded token pays no per-layer adapter bookkeeping,
            # and no adapter code runs at all (so no PEFT disable_adapter: entering and leaving it
            # walks every layer and resets every adapter parameter, 42 ms per call on SmolLM2's
            # CPU and 45-50 ms on the H100 with Qwen2.5-1.5B, per reply).
            try:
                for parent, attr, _, base in slots:
                    setattr(parent, attr, base)
                yield
            finally:
                for parent, attr, lora, _ in slots:
                    setattr(parent, attr, lora)
        finally:
            for b, w in zip(bases, originals):
                b.weight.data = w

    def _lora_slots(self, layers: list) -> list:
        """(parent module, attribute, LoRA wrapper, its base layer) for each of `layers`, cached."""
        cached = getattr(self, "_lora_slot_cache", None)
        if cached is not None and cached[0] is self.peft_model and cached[1] == [id(m) for m in layers]:
            return cached[2]
        want = {id(m): m for m in layers}
        slots = []
        for parent in self.peft_model.modules():
            for attr, child in parent.named_children():
                if id(child) in want:
                    slots.append((parent, attr, child, child.get_base_layer()))
        self._lora_slot_cache = (self.peft_model, [id(m) for m in layers], slots)
        return slots

    # ------------------------------------------------------------------ latent slots
    def embed_with_latents(self, input_ids: torch.Tensor, latent_embeds: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings of `input_ids` with each `<mem>` placeholder replaced, in order, by a latent row.

        `latent_embeds` is ``[R, hidden]`` or any ``[..., hidden]`` (flattened row-major); R must
        equal the number of placeholders in the whole batch, counted row by row.
        """
        return self._embed_latents(input_ids, latent_embeds)[0]

    def _embed_latents(self, input_ids: torch.Tensor, latent_embeds: torch.Tensor | None):
        """(embeddings, slot mask ``[B, S]``, injected rows ``[R, hidden]`` or None): `embed_with_latents`
        plus what `_deep_latents` writes into every decoder layer."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
        embeds = self.base_model.get_input_embeddings()(input_ids)
        slots = input_ids == self.mem_token_id
        n_slots = int(slots.sum())
        if latent_embeds is None:
            if n_slots:
                raise LatentMismatchError(
                    f"input_ids contain {n_slots} {MEM_TOKEN} placeholders but no latent_embeds were given; "
                    f"pass latent_embeds with {n_slots} rows (or remove the placeholders)"
                )
            return embeds, slots, None
        width, hidden = self.latent_width, embeds.shape[-1]
        if latent_embeds.shape[-1] != width:
            what = (f"latent_injection='states' latents of {width} = layers x hidden" if width != hidden
                    else f"the model's hidden size {hidden}")
            raise LatentMismatchError(
                f"latent_embeds have width {latent_embeds.shape[-1]} but this model takes {what}; "
                "compress with this model (latents of another injection mode or model do not fit)"
            )
        full = latent_embeds.reshape(-1, width)
        rows = full[:, :hidden]
        if self.latent_injector is not None:
            rows = self.latent_injector(rows)
        if rows.shape[0] != n_slots:
            raise LatentMismatchError(
                f"input_ids contain {n_slots} {MEM_TOKEN} placeholders but latent_embeds has {rows.shape[0]} rows; "
                f"each latent block of {self.n_mem} vectors needs exactly {self.n_mem} placeholders"
            )
        embeds = embeds.masked_scatter(slots.unsqueeze(-1), rows.to(embeds.dtype))
        if width != hidden:  # "states": what `_deep_latents` writes at layers 1.. is the stored per-layer states
            rows = full[:, hidden:]
        return embeds, slots, rows

    def _decoder_layers(self) -> nn.ModuleList:
        decoder = self.base_model.get_decoder()
        layers = getattr(decoder, "layers", None)
        if layers is None:
            raise RheaConfigError(f"{type(decoder).__name__} has no `.layers`; latent_injection='deep' needs a "
                                  "decoder with a list of layers (Llama/Qwen/Mistral-style)")
        return layers

    @contextlib.contextmanager
    def _deep_latents(self, slots: torch.Tensor, rows: torch.Tensor | None, *, once: bool):
        """``latent_injection="deep"``: inside the block, every decoder layer's input at the `<mem>`
        slots gets the injector's per-layer term of the latent added, so each layer's keys and values
        at a slot read the latent directly (as 500xCompressor feeds a frozen decoder the compressed
        tokens' K/V at every layer), not only through what the layers below made of one input
        embedding.

        A forward call over S tokens is the last S of ``slots``' columns (a `generate` prefill after a
        reused cache feeds only the tokens past it); with `once`, only the first call writes (the
        prefill of `generate`; decode steps feed new tokens). A no-op in other modes."""
        inj = self.latent_injector
        if inj is None or inj.mode not in ("deep", "states") or rows is None or not bool(slots.any()):
            yield
            return
        states = inj.mode == "states"
        hidden_size = self.hidden_size
        layers = self._decoder_layers()
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
                    value = state["rows"][:, (index - 1) * hidden_size:index * hidden_size]
                    hidden = hidden.index_put(state["index"], value.to(hidden.dtype), accumulate=False)
                else:
                    hidden = hidden.index_put(state["index"], inj.at_layer(state["rows"], index).to(hidden.dtype),
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

    def _check_deep_recompute(self) -> None:
        if not (self.latent_injector is not None and self.latent_injector.mode in ("deep", "states") and self.training):
            return
        # the new name first; the deprecated one only where it is the only one (a getattr default is evaluated
        # eagerly, and reading the old name warns on every training forward)
        checkpointing = getattr(self.base_model, "is_activation_checkpointing", None)
        if checkpointing is None:
            checkpointing = getattr(self.base_model, "is_gradient_checkpointing", False)
        if checkpointing:
            raise RheaConfigError(
                f"latent_injection={self.latent_injector.mode!r} writes the latents into each layer with hooks that are gone when "
                "activation checkpointing recomputes a layer in backward; turn gradient_checkpointing off")

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
        with self.adapter("compress"), self._record_slot_states(n) as per_layer:
            # The decoder alone: no lm_head over the vocabulary, which compression never needs.
            hidden = self.base_model.get_decoder()(
                inputs_embeds=embeds,
                attention_mask=attention_mask,
                position_ids=positions_from_mask(attention_mask),
                use_cache=False,
            ).last_hidden_state
        final = hidden[:, -n:, :]
        return torch.cat([final] + per_layer, dim=-1) if per_layer else final

    @contextlib.contextmanager
    def _record_slot_states(self, n: int):
        """``"states"``: collects the last `n` positions' hidden state at the input of decoder layers
        1 .. L-1 during a compress pass (a list, filled when the block exits); empty in other modes."""
        per_layer: list[torch.Tensor] = []
        if self.config.latent_injection != "states":
            yield per_layer
            return
        seen: dict[int, torch.Tensor] = {}

        def make(index: int):
            def hook(module, args, kwargs):
                hidden = args[0] if args else kwargs["hidden_states"]
                seen[index] = hidden[:, -n:, :]
            return hook

        layers = self._decoder_layers()
        handles = [layer.register_forward_pre_hook(make(i), with_kwargs=True) for i, layer in enumerate(layers) if i]
        try:
            yield per_layer
        finally:
            for h in handles:
                h.remove()
        per_layer.extend(seen[i] for i in range(1, len(layers)))

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
            self._check_deep_recompute()
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
        merged = self.merged("generate") if self.decodes_merged and not self._adapters_disabled() \
            else contextlib.nullcontext()
        with self.adapter("generate"), merged, self.decoding(), self._inject_forward_kwargs(anchor), \
                self._deep_latents(slots, rows, once=True):
            return self.peft_model.generate(
                input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **generate_kwargs
            )

    @contextlib.contextmanager
    def _inject_forward_kwargs(self, extra: dict):
        """Add `extra` to every forward call of the base model inside the block.

        ``generate()`` rejects kwargs it cannot match to the model's signature, but the
        attention hook reads them from the forward kwargs that flow down to each layer.
        """
        if not extra:
            yield
            return

        def hook(module, args, kwargs):
            return args, {**kwargs, **extra}

        handle = self.base_model.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()

    # ------------------------------------------------------------------ anchored attention
    def _apply_anchor_config(self) -> None:
        """Switch the backbone to the prefix-anchored attention when ``anchor_bias > 0``."""
        if self.config.anchor_bias <= 0:
            return
        try:
            from rhea_kernels.hf import register_anchored_attention
        except ImportError as e:  # pragma: no cover - rhea_kernels ships with rhea
            raise RheaConfigError(f"anchor_bias={self.config.anchor_bias} needs rhea_kernels.hf ({e})") from e
        name = register_anchored_attention()
        self.base_model.set_attn_implementation(name)
        self.anchor_attention_registered = True

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
