"""KV-cache compression peers (NVIDIA's ``kvpress``) as context policies.

A kvpress *press* prunes the keys and values a model keeps while it prefills a context. As a
conversation policy that means: the whole history is rendered with the chat template and
prefilled under the press, the cache keeps ``1 - compression_ratio`` of its entries, and the
current query is answered from that compressed cache by greedy decoding, the way kvpress's own
``KVPressTextGenerationPipeline`` answers a question about a context. The presses are kvpress's
own classes, not rewritten here; this module only renders the conversation, runs the prefill
under the press and decodes (the pipeline wraps a context as one user message, which is not a
conversation, so its prefill/decode steps are followed, not called).

Policies (registry names):

- ``kvpress-snapkv``: SnapKV, the observation window at the end of the history (the press does
  not see the question);
- ``kvpress-snapkv-q``: SnapKV with the question: the query turn is prefilled under the press
  too, so the observation window holds the question (kvpress's "query-aware" setting);
- ``kvpress-knorm``, ``kvpress-expected-attention``, ``kvpress-streaming-llm``: Knorm,
  ExpectedAttention and StreamingLLM.

``compression_ratio`` is the fraction of cache entries pruned; ``keep_tokens=N`` sets it per
turn so that about N history entries stay (matching another policy's token budget).

kvpress is an optional peer dependency. Its 0.5.5 release pins ``transformers<5.3``; the
project's own environment may be newer, so ``make peers`` builds a separate environment
(``requirements-peers.txt``) where these policies run (``rhea bench --policies kvpress-snapkv``).
Without kvpress a policy here raises `PeerMissingError` when it is built.

>>> from rhea.peers.kvpress_policy import PRESSES
>>> sorted(PRESSES)
['expected-attention', 'knorm', 'snapkv', 'snapkv-q', 'streaming-llm']
"""
from __future__ import annotations

import time
from typing import Any

import torch

from rhea.backends.llm import cache_keyword
from rhea.context.conversation import Conversation
from rhea.context.plan import ContextPlan, PlanDecisions, TokenLedger, TurnDecision
from rhea.errors import MissingModelPackageError, RheaConfigError
from rhea.policies.assemble import SystemSource, resolve_system
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy

#: press name -> (kvpress class name, whether the query is prefilled under the press)
PRESSES = {
    "snapkv": ("SnapKVPress", False),
    "snapkv-q": ("SnapKVPress", True),
    "knorm": ("KnormPress", False),
    "expected-attention": ("ExpectedAttentionPress", False),
    "streaming-llm": ("StreamingLLMPress", False),
}
ANSWER_EVENT = "kvpress_answer"


class PeerMissingError(MissingModelPackageError):
    """A peer method's library is not installed in this environment (the message says how to get it)."""


def kvpress_version() -> str | None:
    """The installed kvpress version, or None."""
    try:
        from importlib.metadata import version

        return version("kvpress")
    except Exception:  # noqa: BLE001 - not installed
        return None


def _press_class(name: str):
    try:
        import kvpress
    except ImportError as e:
        raise PeerMissingError(
            f"policy kvpress-{name} needs the kvpress package ({e}); build the peers environment with "
            "`make peers` and run it there (`.venv-peers/bin/rhea bench ...`)"
        ) from None
    return getattr(kvpress, PRESSES[name][0])


def attention_takes_past_key_values() -> bool:
    """Whether this transformers' attention layers take ``past_key_values`` (as kvpress's hooks
    expect; transformers 5.3 renamed it ``cache`` and stopped passing ``cache_position``)."""
    import inspect

    from transformers.models.llama.modeling_llama import LlamaAttention

    return "past_key_values" in inspect.signature(LlamaAttention.forward).parameters


def compatible(press):
    """`press`, its forward hook given the keyword names kvpress 0.5.5 reads, on a transformers
    whose attention layers take ``cache`` and no ``cache_position`` (5.3 and later).

    The patch is the one an upstream fix would make: ``past_key_values`` is the layer's ``cache``,
    and ``cache_position`` the positions of the ``q_len`` entries the layer has just written (the
    cache has been updated when a forward hook runs). Nothing else of the press changes. On a
    transformers that still passes both, the press is returned as it is.
    """
    if attention_takes_past_key_values():
        return press
    hook = type(press).forward_hook

    def forward_hook(module, input, kwargs, output):
        if "past_key_values" not in kwargs and kwargs.get("cache") is not None:
            cache = kwargs["cache"]
            q_len = kwargs["hidden_states"].shape[1]
            end = cache.get_seq_length(module.layer_idx)
            kwargs = {**kwargs, "past_key_values": cache,
                      "cache_position": torch.arange(end - q_len, end, device=kwargs["hidden_states"].device)}
        return hook(press, module, input, kwargs, output)

    press.forward_hook = forward_hook
    return press


def cache_bytes(cache) -> int:
    """Bytes held by a transformers KV cache (keys and values of every layer)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def split_prompt(tokenizer, history: list[dict], query: str) -> tuple[list[int], list[int]]:
    """The chat-template ids of `history` (the context a press prunes) and of the query turn
    that follows it (user message + generation prompt), so that context + question is exactly
    the full prompt. Where a template does not render the history as a prefix of the full
    prompt, the longest common prefix is the context."""
    full = tokenizer.apply_chat_template(history + [{"role": "user", "content": query}],
                                         add_generation_prompt=True, tokenize=True)
    full = list(full["input_ids"] if isinstance(full, dict) or hasattr(full, "keys") else full)
    if not history:
        return [], full
    ctx = tokenizer.apply_chat_template(history, add_generation_prompt=False, tokenize=True)
    ctx = list(ctx["input_ids"] if isinstance(ctx, dict) or hasattr(ctx, "keys") else ctx)
    n = 0
    for a, b in zip(ctx, full):
        if a != b:
            break
        n += 1
    return full[:n], full[n:]


class KVPressPolicy(ContextPolicy):
    """Full history, prefilled under a kvpress press; the reply decoded from the pruned cache."""

    model_arg = "model"
    press_name: str = "snapkv"

    def __init__(self, model, *, compression_ratio: float = 0.5, keep_tokens: int | None = None,
                 max_new_tokens: int = 64, system_prompt: SystemSource = None, tokenizer: Any = None,
                 **press_kwargs: Any):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if isinstance(compression_ratio, bool) or not isinstance(compression_ratio, (int, float)) \
                or not 0.0 <= float(compression_ratio) < 1.0:
            raise RheaConfigError(f"compression_ratio={compression_ratio!r} must be a number in [0, 1)")
        if keep_tokens is not None and (isinstance(keep_tokens, bool) or not isinstance(keep_tokens, int)
                                        or keep_tokens < 1):
            raise RheaConfigError(f"keep_tokens={keep_tokens!r} must be an int >= 1 (or None for a fixed ratio)")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise RheaConfigError(f"max_new_tokens={max_new_tokens!r} must be an int >= 1")
        self.model = model
        self.compression_ratio = float(compression_ratio)
        self.keep_tokens = keep_tokens
        self.max_new_tokens = max_new_tokens
        self.press_kwargs = dict(press_kwargs)
        self._cls = _press_class(self.press_name)  # fails here, before any turn, without kvpress
        self.query_aware = PRESSES[self.press_name][1]
        self._work = {"press_prefill_s": 0.0, "press_decode_s": 0.0}
        self.last_kv_bytes = 0

    def config(self) -> dict:
        return {"press": self.press_name, "compression_ratio": self.compression_ratio,
                "keep_tokens": self.keep_tokens, "max_new_tokens": self.max_new_tokens,
                "kvpress": kvpress_version(), **self.press_kwargs}

    def counters(self) -> dict[str, float]:
        return dict(self._work)

    def held_bytes(self) -> dict[str, int]:
        """The pruned keys/values of the last turn's context (the plan's ``kv_bytes``): the cache this
        policy answers from, rebuilt under the press every turn."""
        return {"kv_cache": int(self.last_kv_bytes)}

    def planned_answer(self, plan: ContextPlan) -> str | None:
        for record in reversed(plan.decisions.records):
            if record.get("event") == ANSWER_EVENT:
                return record["answer"]
        return None

    def _ratio(self, n_context: int) -> float:
        if self.keep_tokens is None:
            return self.compression_ratio
        return max(0.0, 1.0 - self.keep_tokens / max(n_context, 1))

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        from transformers import DynamicCache

        system_text, instructions = resolve_system(self.system_prompt)
        history = [{"role": "system", "content": system_text}] if system_text.strip() else []
        for turn in conversation:
            history += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.assistant}]
        tok = self.model.tokenizer
        context, question = split_prompt(tok, history, query)
        if self.query_aware:  # the question is part of what the press sees (and prunes)
            context, question = context + question[:-1], question[-1:]
        ratio = self._ratio(len(context))
        press = compatible(self._cls(compression_ratio=ratio, **self.press_kwargs))
        window = int(getattr(press, "window_size", 0) or 0)
        if len(context) <= window:  # SnapKV scores by its last `window_size` queries: a shorter context stays whole
            ratio = 0.0
        hf = self.model.base_model
        device = self.model.device
        cache = DynamicCache()
        kw = cache_keyword(hf)
        t0 = time.perf_counter()
        with torch.inference_mode(), self.model.disable_adapters():
            if context and ratio == 0.0:
                hf.model(input_ids=torch.tensor([context], device=device), **{kw: cache})
            elif context:
                with press(hf):
                    hf.model(input_ids=torch.tensor([context], device=device), **{kw: cache})
            kept = cache.get_seq_length() if context else 0
            self.last_kv_bytes = cache_bytes(cache)  # what the pruned context holds
            t1 = time.perf_counter()
            answer_ids = self._decode(hf, cache, kw, question, len(context), device)
        t2 = time.perf_counter()
        self._work["press_prefill_s"] += t1 - t0
        self._work["press_decode_s"] += t2 - t1
        answer = tok.decode(answer_ids, skip_special_tokens=True)
        n = len(conversation)
        decisions = PlanDecisions(
            [TurnDecision(i, "raw", note=f"prefilled under {self.press_name} (ratio {ratio:.3f})") for i in range(n)],
            instructions,
            [{"event": "kvpress", "press": self.press_name, "compression_ratio": round(ratio, 4),
              "context_tokens": len(context), "kv_tokens_kept": int(kept), "kv_bytes": self.last_kv_bytes},
             {"event": ANSWER_EVENT, "answer": answer}],
        )
        ledger = TokenLedger(text_tokens=int(kept) + len(question), full_history_tokens=len(context) + len(question),
                             counter="tokenizer")
        messages = history + [{"role": "user", "content": query}]
        return ContextPlan(messages, decisions, ledger, self.name)

    def _decode(self, hf, cache, kw: str, question: list[int], context_length: int, device) -> list[int]:
        """Greedy decoding from the (pruned) cache, positions continuing after the full context
        (kvpress's `generate_answer`)."""
        eos = hf.generation_config.eos_token_id
        stop = set(eos if isinstance(eos, list) else [eos])
        pos = torch.arange(context_length, context_length + len(question), device=device).unsqueeze(0)
        out = hf(input_ids=torch.tensor([question], device=device), **{kw: cache}, position_ids=pos,
                 logits_to_keep=1)
        ids = [int(out.logits[0, -1].argmax())]
        nxt = pos[:, -1:] + 1
        for _ in range(self.max_new_tokens - 1):
            if ids[-1] in stop:
                break
            out = hf(input_ids=torch.tensor([[ids[-1]]], device=device), **{kw: cache}, position_ids=nxt)
            nxt = nxt + 1
            ids.append(int(out.logits[0, -1].argmax()))
        return ids


def _policy(press: str, registry_name: str):
    cls = type(f"KVPress_{press.replace('-', '_')}", (KVPressPolicy,), {"press_name": press,
               "__doc__": f"kvpress's {PRESSES[press][0]} ({'with' if PRESSES[press][1] else 'without'} the question)."})
    cls.__module__ = __name__
    return register_policy(registry_name)(cls)


for _press in PRESSES:
    globals()[f"KVPress_{_press.replace('-', '_')}"] = _policy(_press, f"kvpress-{_press}")
