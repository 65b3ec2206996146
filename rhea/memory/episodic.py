"""Episodic memory: each past reply compressed once into latents, scored against each new query."""
from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Callable, Sequence

import torch

from rhea.context.conversation import Turn
from rhea.context.latent import stack_rows

CENTERING_MODES = ("fixed", "running", "none")


@dataclass
class EpisodicEntry:
    """One past turn: the user's text, the reply, and the reply's ``[rows, width]`` latents (``n_mem`` rows, or
    ``n_mem`` per chunk under ``RheaConfig.compress_chunk_tokens``)."""

    turn: int
    user: str
    assistant: str
    latents: torch.Tensor


class EpisodicMemory:
    """``(u_i, b_i, Vk_i)`` for every past turn; ``Vk_i`` computed once, when the reply arrives, or only for the
    turns asked for (`ensure`: a policy that shows latents but does not score them compresses only those it shows).

    `compress_fn` maps texts to ``[B, n_mem, hidden]`` (e.g. ``model.compress``) or to one ``[rows, hidden]`` per
    text (``model.compress_replies``; a turn with fewer rows is scored as it is: `stack_rows`). Scores are
    ``max(norm(Vq) · norm(Vk_i)ᵀ)`` from ``rhea_kernels.turn_scores``, optionally after
    subtracting a centre from both sides (``RheaConfig.latent_centering``):

    * ``"fixed"`` (default): subtract `center` when one is given (``RheaConfig.latent_center``,
      written by ``rhea calibrate``); raw cosine when it is None;
    * ``"running"``: subtract the running mean of every latent this memory has seen (stored
      replies and the query being scored), which needs no calibration data;
    * ``"none"``: raw cosine (the paper's rule), even when `center` is set.

    `score_view` picks what is scored from a stored latent (``model.score_view``: the final states;
    under ``latent_injection="states"`` a latent also holds the per-layer slot states, which the
    generate pass reads but the scores do not); None scores the latent as it is.

    >>> from rhea.testing import tiny_rhea                            # doctest: +SKIP
    >>> em = EpisodicMemory(tiny_rhea().compress)                     # doctest: +SKIP
    >>> em.append(Turn("hi", "hello there")); em.score("hello?")     # doctest: +SKIP
    tensor([0.93])
    """

    def __init__(self, compress_fn: Callable[[Sequence[str]], torch.Tensor], *, center: torch.Tensor | None = None,
                 centering: str = "fixed", score_view: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 max_bytes: int | None = None,
                 store_dtype: torch.dtype | Callable[[], torch.dtype] | None = None):
        if centering not in CENTERING_MODES:
            raise ValueError(f"centering={centering!r} must be one of {CENTERING_MODES}")
        #: the most bytes of latents `ensure` keeps: past it, the latents shown least recently are let go (they
        #: are compressed again if a later plan shows them). None: no bound. Entries stored by `extend` (a
        #: memory that scores every turn needs every one) are not let go.
        self.max_bytes = max_bytes
        #: the dtype stored latents are kept in (or a callable giving it, e.g. the model's dtype at the time);
        #: None keeps float32. Scores are computed in float32 whatever is stored.
        self.store_dtype = store_dtype
        self.evictions = 0
        self._shown: dict[int, int] = {}  # turn -> when `ensure` last asked for it
        self._clock = 0
        self.compress_fn = compress_fn
        self.center = center
        self.centering = centering
        self.score_view = score_view or (lambda x: x)
        self.entries: list[EpisodicEntry] = []
        self.compress_calls = 0
        self.compress_seconds = 0.0

    def __len__(self) -> int:
        return len(self.entries)

    @torch.no_grad()
    def _compress(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """fp32 latents per text (``[rows, width]``), left on the device that made them (a GPU model's are scored
        there, by Triton). `compress_fn` may return ``[B, n_mem, width]`` or a list of ``[rows_i, width]`` (a
        reply compressed chunk by chunk: `RheaForCausalLM.compress_replies`)."""
        self.compress_calls += 1
        t0 = time.perf_counter()
        try:
            return [x.detach().float() for x in self.compress_fn(list(texts))]
        finally:
            self.compress_seconds += time.perf_counter() - t0

    def _stored(self, latents: torch.Tensor) -> torch.Tensor:
        """`latents` in the dtype this memory stores."""
        dtype = self.store_dtype() if callable(self.store_dtype) else self.store_dtype
        return latents if dtype is None or latents.dtype == dtype else latents.to(dtype)

    def extend(self, turns: Sequence[Turn]) -> None:
        """Compress the replies of `turns` in one batch and store them as the next entries."""
        if not turns:
            return
        latents = [self._stored(x) for x in self._compress([t.assistant for t in turns])]
        for turn, lat in zip(turns, latents):
            self.entries.append(EpisodicEntry(len(self.entries), turn.user, turn.assistant, lat))

    def append(self, turn: Turn) -> None:
        self.extend([turn])

    def get(self, turn: int) -> EpisodicEntry | None:
        """The stored entry of conversation turn `turn`, or None."""
        if turn < len(self.entries) and self.entries[turn].turn == turn:
            return self.entries[turn]  # a memory that stores every turn holds turn i at position i
        return next((e for e in self.entries if e.turn == turn), None)

    def ensure(self, turns: Sequence[Turn], indices) -> list[int]:
        """Store latents for the replies of ``turns[i]`` for each i in `indices` (a memory that compresses only
        the replies a plan shows as latents): the ones not stored yet, or stored for a reply that has changed
        since, are compressed in one batch; a stored one is never compressed again. Returns the turns
        compressed now."""
        indices = sorted(set(indices))
        self._clock += 1
        self._shown.update((i, self._clock) for i in indices)
        todo = [i for i in indices if (e := self.get(i)) is None or e.assistant != turns[i].assistant]
        if not todo:
            return []
        self.entries = [e for e in self.entries if e.turn not in set(todo)]
        for i, lat in zip(todo, self._compress([turns[i].assistant for i in todo])):
            self.entries.append(EpisodicEntry(i, turns[i].user, turns[i].assistant, self._stored(lat)))
        self.entries.sort(key=lambda e: e.turn)
        self._bound(keep=set(indices))
        return todo

    def nbytes(self) -> int:
        """Bytes of the latents stored now."""
        return sum(e.latents.element_size() * e.latents.nelement() for e in self.entries)

    def _bound(self, keep: set[int]) -> None:
        """Let go of the latents shown least recently (never those in `keep`) until `max_bytes` holds them."""
        if self.max_bytes is None:
            return
        total = self.nbytes()
        if total <= self.max_bytes:
            return
        for entry in sorted((e for e in self.entries if e.turn not in keep), key=lambda e: self._shown.get(e.turn, 0)):
            if total <= self.max_bytes:
                break
            total -= entry.latents.element_size() * entry.latents.nelement()
            self.entries.remove(entry)
            self._shown.pop(entry.turn, None)
            self.evictions += 1

    def sync(self, turns: Sequence[Turn]) -> None:
        """Catch up with a conversation: compress only the turns not yet stored (one batch)."""
        if len(turns) < len(self.entries):
            raise ValueError(
                f"episodic memory holds {len(self.entries)} turns but the conversation has {len(turns)}; "
                "reset() the policy before reusing it on another conversation"
            )
        for i, (entry, turn) in enumerate(zip(self.entries, turns)):
            if entry.assistant != turn.assistant:
                raise ValueError(f"turn {i} differs from the one stored; reset() the policy for a new conversation")
        self.extend(list(turns)[len(self.entries):])

    def query_latents(self, query: str) -> torch.Tensor:
        """The query's latents as scored (``score_view`` applied)."""
        return self.score_view(self._compress([query])[0])

    def _scored(self, query: str | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        vq = self.query_latents(query) if isinstance(query, str) else self.score_view(query.float())
        return vq, stack_rows([self.score_view(e.latents).to(vq.device, torch.float32) for e in self.entries])

    def score(self, query: str | torch.Tensor) -> torch.Tensor:
        """Scores ``[T]`` of every stored turn against `query` (text, or its ``[n, hidden]`` latents)."""
        from rhea_kernels import turn_scores

        if not self.entries:
            return torch.zeros(0)
        # entries loaded from a saved session sit on the CPU; score where the query was made
        vq, vk = self._scored(query)
        center = self.score_center(vq)
        return turn_scores(vq[None], vk[None], center=None if center is None else center.to(vq.device))[0].cpu()

    def score_and_tiers(self, query: str | torch.Tensor, tau_low: float, tau_high: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[T]`` and int8 tiers ``[T]`` (0 drop, 1 latent, 2 raw: `rhea.constants.TIERS`) in one fused kernel call."""
        from rhea_kernels import turn_scores_and_tiers

        if not self.entries:
            return torch.zeros(0), torch.zeros(0, dtype=torch.int8)
        vq, vk = self._scored(query)
        center = self.score_center(vq)
        scores, tiers = turn_scores_and_tiers(vq[None], vk[None], tau_low, tau_high,
                                              center=None if center is None else center.to(vq.device))
        return scores[0].cpu(), tiers[0].cpu()

    def score_center(self, query_latents: torch.Tensor | None = None) -> torch.Tensor | None:
        """The vector subtracted before cosine under this memory's centering mode (None = raw cosine)."""
        if self.centering == "none":
            return None
        if self.centering == "fixed":
            return self.center
        seen = [self.score_view(e.latents).float() for e in self.entries] + \
            ([self.score_view(query_latents.float())] if query_latents is not None else [])
        if not seen:
            return None
        flat = torch.cat([x.reshape(-1, x.shape[-1]).to(seen[-1].device) for x in seen])
        return flat.mean(0)

    def state_dict(self) -> dict:
        """Texts as JSON-friendly lists; latents as one tensor (saved with safetensors): ``[T, n_mem, width]``, or,
        when turns hold different row counts (replies compressed in chunks), their rows ``[sum rows, width]`` with
        ``"rows"`` (one count per turn)."""
        lats = [e.latents.cpu() for e in self.entries]
        state = {"users": [e.user for e in self.entries], "assistants": [e.assistant for e in self.entries],
                 "latents": None}
        if any(e.turn != i for i, e in enumerate(self.entries)):  # only some turns stored (`ensure`)
            state["turns"] = [e.turn for e in self.entries]
        if lats and len({x.shape[0] for x in lats}) == 1:
            state["latents"] = torch.stack(lats)
        elif lats:
            state["latents"], state["rows"] = torch.cat(lats), [x.shape[0] for x in lats]
        return state

    def load_state_dict(self, state: dict) -> None:
        users, assistants, latents = state["users"], state["assistants"], state["latents"]
        rows = state.get("rows")
        if rows is not None and latents is not None:
            if len(rows) != len(users) or sum(rows) != latents.shape[0]:
                raise ValueError("episodic state is inconsistent: 'rows' must give one row count per turn, "
                                 "summing to the latents' rows")
            latents = list(torch.split(latents, list(rows)))
        if len(users) != len(assistants) or (latents is None) != (len(users) == 0) or (latents is not None and len(latents) != len(users)):
            raise ValueError("episodic state is inconsistent: users, assistants and latents must have one entry per turn")
        turns = state.get("turns")
        if turns is None:
            turns = list(range(len(users)))
        elif (len(turns) != len(users) or not all(isinstance(t, int) and t >= 0 for t in turns)
              or list(turns) != sorted(set(turns))):
            raise ValueError("episodic state is inconsistent: 'turns' must give one distinct turn index >= 0 per "
                             "entry, in increasing order")
        self.entries = [EpisodicEntry(t, u, a, self._stored(latents[i])) for i, (t, u, a) in enumerate(zip(turns, users, assistants))]
