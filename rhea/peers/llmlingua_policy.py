"""Prompt-compression peers (Microsoft's ``llmlingua``) as context policies.

LLMLingua drops the tokens of a prompt that a small causal LM finds least surprising, under a
token budget; LongLLMLingua ranks the pieces by how much they tell about the question first
(question-aware coarse filter, reordering, a dynamic ratio per piece). As a conversation
policy every past turn is one context piece ("User: ...\\nAssistant: ..."), the compressed
history goes into the system block (after the instructions, like the rolling summary), and the
query follows as the user message; the session then answers with the plain model. The
compression is llmlingua's own `PromptCompressor.compress_prompt`; nothing of it is rewritten.

Registry names: ``llmlingua`` (question-agnostic) and ``longllmlingua`` (question-aware:
``rank_method="longllmlingua"``, the question after the condition, pieces sorted by rank, a
dynamic ratio of 0.3, and condition comparison, the settings of LongLLMLingua's paper).

Offline: `PromptCompressor` counts tokens with tiktoken's ``gpt-3.5-turbo`` encoding, which
tiktoken downloads on first use. Here that counter is the scorer model's own tokenizer
(`TokenizerCounter`, handed to the compressor in place of the tiktoken encoding while it is
built), so no file is fetched and budgets are counted in the tokens the model reads. The scorer
is a local model: a zoo name (default: the embedded model) or a directory.

>>> TokenizerCounter.__name__
'TokenizerCounter'
"""
from __future__ import annotations

import contextlib
import time
from typing import Any

from rhea.context.conversation import Conversation
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.errors import RheaConfigError
from rhea.peers.kvpress_policy import PeerMissingError
from rhea.policies.assemble import SystemSource, assemble_plan, count_tokens
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy

#: LongLLMLingua's question-aware settings (its paper's recommended configuration)
LONGLLMLINGUA = {"rank_method": "longllmlingua", "condition_in_question": "after_condition",
                 "reorder_context": "sort", "dynamic_context_compression_ratio": 0.3, "condition_compare": True,
                 "context_budget": "+100"}
HEADER = "Earlier conversation (compressed):"


def llmlingua_version() -> str | None:
    """The installed llmlingua version, or None."""
    try:
        from importlib.metadata import version

        return version("llmlingua")
    except Exception:  # noqa: BLE001 - not installed
        return None


class TokenizerCounter:
    """A Hugging Face tokenizer with tiktoken's ``encode`` / ``decode`` faces, the token
    counter `PromptCompressor` asks for.

    >>> class Tok:
    ...     def __call__(self, text, add_special_tokens=False): return {"input_ids": list(range(len(text.split())))}
    ...     def decode(self, ids): return " ".join("w" for _ in ids)
    >>> TokenizerCounter(Tok()).encode("a b c")
    [0, 1, 2]
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids, **_: Any) -> str:
        return self.tokenizer.decode(list(ids))


@contextlib.contextmanager
def offline_counter(module):
    """While a `PromptCompressor` is built, tiktoken's `encoding_for_model` (which would fetch
    the encoding) hands back a placeholder; the builder then sets the compressor's counter to a
    `TokenizerCounter` over the tokenizer it loaded."""
    original = module.tiktoken.encoding_for_model
    module.tiktoken.encoding_for_model = lambda _name: _Deferred()
    try:
        yield
    finally:
        module.tiktoken.encoding_for_model = original


class _Deferred:
    """Stands in for the tiktoken encoding until the compressor's own tokenizer exists."""


def _compressor(scorer: str, device: str):
    try:
        from llmlingua import prompt_compressor as module
    except ImportError as e:
        raise PeerMissingError(
            f"policy llmlingua needs the llmlingua package ({e}); build the peers environment with `make peers` "
            "and run it there (`.venv-peers/bin/rhea bench ...`)"
        ) from None
    from rhea.modeling.zoo import resolve_model_path

    path = resolve_model_path(scorer)
    with offline_counter(module):
        compressor = module.PromptCompressor(model_name=path, device_map=device,
                                             model_config={"trust_remote_code": False})
    compressor.oai_tokenizer = TokenizerCounter(compressor.tokenizer)
    return compressor


class LLMLinguaPolicy(ContextPolicy):
    """Every past turn compressed by LLMLingua into the system block; the query answered from it."""

    question_aware: bool = False

    def __init__(self, *, scorer: str = "smollm2-135m", rate: float = 0.5, target_tokens: int | None = None,
                 device: str = "cpu", system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < float(rate) <= 1.0:
            raise RheaConfigError(f"rate={rate!r} must be a number in (0, 1]: the fraction of history tokens kept")
        if target_tokens is not None and (isinstance(target_tokens, bool) or not isinstance(target_tokens, int)
                                          or target_tokens < 1):
            raise RheaConfigError(f"target_tokens={target_tokens!r} must be an int >= 1 (or None to keep `rate`)")
        if not isinstance(scorer, str) or not scorer.strip():
            raise RheaConfigError(f"scorer={scorer!r} must be a zoo name or a model directory")
        self.scorer, self.rate, self.target_tokens, self.device = scorer, float(rate), target_tokens, device
        self._compressor = _compressor(scorer, device)  # fails here, before any turn, without llmlingua
        self._work = {"compress_calls": 0.0, "compress_s": 0.0}

    def config(self) -> dict:
        return {"scorer": self.scorer, "rate": self.rate, "target_tokens": self.target_tokens,
                "question_aware": self.question_aware, "llmlingua": llmlingua_version()}

    def counters(self) -> dict[str, float]:
        return dict(self._work)

    def compress_history(self, conversation: Conversation, query: str) -> tuple[str, dict]:
        """The compressed history and llmlingua's own report (tokens before and after)."""
        pieces = [f"User: {t.user}\nAssistant: {t.assistant}" for t in conversation]
        kwargs: dict[str, Any] = {"rate": self.rate, "concate_question": False}
        if self.target_tokens is not None:
            kwargs["target_token"] = self.target_tokens
        if self.question_aware:
            kwargs.update(LONGLLMLINGUA, question=query)
        t0 = time.perf_counter()
        result = self._compressor.compress_prompt(pieces, **kwargs)
        self._work["compress_calls"] += 1
        self._work["compress_s"] += time.perf_counter() - t0
        report = {k: result.get(k) for k in ("origin_tokens", "compressed_tokens", "ratio", "rate")}
        return str(result["compressed_prompt"]).strip(), report

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        if not len(conversation):
            return assemble_plan(self.name, conversation, query, [], system_source=self.system_prompt,
                                 tokenizer=self.tokenizer)
        compressed, report = self.compress_history(conversation, query)
        decisions = [TurnDecision(i, "drop", None, f"compressed by {self.name} into the system block")
                     for i in range(len(conversation))]
        plan = assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt,
                             extra_system=[f"{HEADER}\n{compressed}"] if compressed else [],
                             records=[{"event": self.name, **report,
                                       "kept_tokens": count_tokens(compressed, self.tokenizer)}],
                             tokenizer=self.tokenizer)
        return plan


@register_policy("llmlingua")
class LLMLingua(LLMLinguaPolicy):
    """LLMLingua: question-agnostic token dropping by a small LM's perplexity."""


@register_policy("longllmlingua")
class LongLLMLingua(LLMLinguaPolicy):
    """LongLLMLingua: pieces ranked by what they tell about the question, then compressed."""

    question_aware = True
