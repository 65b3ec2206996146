"""Text generators: the one interface every LLM-driven controller talks to.

A `TextGenerator` turns chat messages into a reply. Controllers (the instruction
recognizer's classifier, rolling summaries, Sculptor, ACR, ACE, Context-Agent) depend on
this protocol only, so they run the same on a local Hugging Face model, an
OpenAI-compatible endpoint, or a scripted generator in tests.
"""
from __future__ import annotations

import copy
import inspect
from typing import Iterable, Protocol, Sequence, runtime_checkable

from rhea.backends.chat_template import apply_chat_template
from rhea.errors import ContextWindowError, RheaConfigError

Message = dict  # {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}


def cache_keyword(model) -> str:
    """The keyword `generate` takes a transformers cache under: ``cache`` (transformers 5.x renamed
    it) or ``past_key_values``, whichever the model's forward has. A PEFT wrapper or a
    `RheaForCausalLM` passes it on to the model it wraps, so that one is looked at."""
    inner = getattr(model, "base_model", None) if hasattr(model, "mem_token_id") else None
    if inner is None:
        inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


@runtime_checkable
class TextGenerator(Protocol):
    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
    ) -> str:
        """Return the assistant's reply to `messages`."""
        ...


class ScriptedGenerator:
    """Replies from a fixed script, in order; records every prompt it was given.

    >>> g = ScriptedGenerator(["YES", "NO"])
    >>> g.generate([{"role": "user", "content": "hi"}])
    'YES'
    """

    def __init__(self, replies: Iterable[str]):
        self.replies = list(replies)
        self.calls: list[list[Message]] = []

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls.append([dict(m) for m in messages])
        if not self.replies:
            raise RuntimeError(
                f"ScriptedGenerator ran out of replies after {len(self.calls) - 1} calls; "
                "give it one reply per expected call"
            )
        return self.replies.pop(0)


def _chat_ids(tokenizer, messages: Sequence[Message]):
    text = apply_chat_template(tokenizer, [{"role": m["role"], "content": m["content"]} for m in messages])
    return tokenizer(text, add_special_tokens=False, return_tensors="pt")


class HFGenerator:
    """A local Hugging Face causal LM (or a `RheaForCausalLM`) as a `TextGenerator`.

    For a `RheaForCausalLM`, ``adapter=None`` runs the plain base model (both LoRAs disabled:
    what controllers and classifiers want), ``adapter="generate"`` the generate adapter.

    ``prefix_cache=True`` keeps the KV cache of the last call (its prompt and reply) and starts
    the next call from the longest token prefix the two share, so an agent whose every step
    re-sends the transcript so far (Sculptor's tool loop, ACE's rounds, a controller's questions
    under one system prompt) prefills only what is new. Greedy replies are those of a full
    prefill up to floating-point reassociation (the same tokens in the tests). The cache is
    only valid while the weights and the adapter stay as they were: call `reset_prefix_cache`
    after training or changing them. `prompt_tokens` still counts every prompt token (what an
    API would bill); `cached_prompt_tokens` counts those served from the cache.

    >>> gen = HFGenerator(model, tokenizer)                                   # doctest: +SKIP
    >>> gen.generate([{"role": "user", "content": "Say hi"}], max_new_tokens=8)  # doctest: +SKIP
    """

    #: a shared prefix shorter than this is recomputed (copying and cropping the cache costs more)
    MIN_CACHED_PREFIX = 16

    def __init__(self, model, tokenizer=None, *, adapter: str | None = None, seed: int | None = None,
                 prefix_cache: bool = False):
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if self.tokenizer is None:
            raise RheaConfigError("HFGenerator needs a tokenizer: pass tokenizer= (a RheaForCausalLM carries its own)")
        self.adapter = adapter
        self.seed = seed
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.prefix_cache = bool(prefix_cache)
        self.cached_prompt_tokens = 0
        self._cache = None  # KV cache of the last call (n == 1), covering `_cache_ids`
        self._cache_ids: list[int] = []

    @property
    def window(self) -> int | None:
        """The model's context window in tokens (``max_context``, else ``max_position_embeddings``);
        None when the model declares none."""
        w = getattr(self.model, "max_context", None)
        if w is None:
            config = getattr(self._backbone(), "config", None)
            text = config.get_text_config() if hasattr(config, "get_text_config") else config
            w = getattr(text, "max_position_embeddings", None)
        return int(w) if isinstance(w, int) and not isinstance(w, bool) else None

    def prompt_room(self, max_new_tokens: int) -> int | None:
        """The most tokens a rendered prompt may hold for a reply of `max_new_tokens` (None: no window)."""
        w = self.window
        return None if w is None else w - max_new_tokens

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of `messages` rendered with the chat template and the generation prompt, as `generate` feeds them."""
        return int(_chat_ids(self.tokenizer, messages)["input_ids"].shape[1])

    def check_fits(self, n_prompt: int, max_new_tokens: int) -> None:
        """`ContextWindowError` when a prompt of `n_prompt` tokens and a reply of `max_new_tokens` overrun the
        model's window; called before any model work, so an inner prompt (a summarizer's, an agent's tool
        loop) never runs past the positions the model has."""
        w = self.window
        if w is not None and n_prompt + max_new_tokens > w:
            raise ContextWindowError(
                f"a prompt of {n_prompt} tokens with max_new_tokens={max_new_tokens} exceeds the model's window of "
                f"{w} tokens by {n_prompt + max_new_tokens - w}; the caller that wrote it must fit it to "
                f"prompt_room(max_new_tokens) = {w - max_new_tokens} tokens (shorter messages, or a lower "
                "max_new_tokens)")

    def reset_prefix_cache(self) -> None:
        """Forget the kept KV cache (after the weights or the adapter changed)."""
        self._cache, self._cache_ids = None, []

    def _cache_keyword(self, model) -> str:
        return cache_keyword(model)

    def _start_cache(self, model, ids: list[int], n: int):
        """The cache a call on `ids` starts from (None: full prefill), and how many tokens it covers."""
        from transformers import DynamicCache

        shared = min(_common_prefix(self._cache_ids, ids), len(ids) - 1) if self._cache is not None else 0
        if shared < self.MIN_CACHED_PREFIX:
            self.reset_prefix_cache()
            return (DynamicCache(config=getattr(model, "config", None)) if n == 1 else None), 0
        cache = self._cache
        extra = cache.get_seq_length() - shared
        if extra > 0:
            cache.crop(-extra)
        self._cache_ids = self._cache_ids[:shared]
        if n > 1:  # k sampled rows read their own copies; the kept cache stays the shared prefix
            cache = copy.deepcopy(cache)
            cache.batch_repeat_interleave(n)
        return cache, shared

    def _context(self):
        """The adapter this generator runs (a `RheaForCausalLM`), with decoding steps' linear layers
        on `rhea_kernels.decode_linear` where the model decodes with it (CPU, fp32)."""
        import contextlib

        is_rhea = hasattr(self.model, "disable_adapters") and hasattr(self.model, "adapter")
        stack = contextlib.ExitStack()
        if is_rhea:
            stack.enter_context(self.model.adapter(self.adapter) if self.adapter else self.model.disable_adapters())
        decoding = getattr(self.model, "decoding", None)  # a RheaForCausalLM decides for itself; others (a plain
        # HF model, ACR's controller with its adapters) by their backbone's weights
        stack.enter_context(decoding() if callable(decoding) else _plain_decoding(self._backbone()))
        return stack

    def _backbone(self):
        return self.model.peft_model if hasattr(self.model, "peft_model") else self.model

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        return self._run(messages, 1, max_new_tokens, temperature, stop)[0]

    def generate_many(self, messages, n: int, *, max_new_tokens=256, temperature=0.7, stop=None) -> list[str]:
        """`n` sampled replies to the same `messages` from one prefill (``num_return_sequences``).

        What k agents voting on one prompt need: the prompt is encoded once and the `n` rows
        decode as one batch, so on a memory-bound device `n` replies cost about one. Counted
        as `n` separate calls would be (`n` x the prompt; each row's tokens up to and
        including its end-of-sequence token), so token totals do not depend on batching.
        `temperature` must be > 0: greedy rows would all be the same reply.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise RheaConfigError(f"generate_many: n={n!r} must be an int >= 1")
        if not temperature or temperature <= 0:
            raise RheaConfigError(f"generate_many: temperature={temperature!r} must be > 0 (greedy rows are identical; "
                                  "call generate() once instead)")
        return self._run(messages, n, max_new_tokens, temperature, stop)

    def continuation_logprobs(self, prompt: str, continuations: Sequence[str], *, encode=None,
                              batch: bool = True) -> tuple[list[float], int]:
        """(log p(c | prompt) for each continuation c, tokens read), from one prefill of the prompt.

        `prompt` is rendered text (e.g. a chat template with the generation prompt, plus any
        assistant text already written). Each ``prompt + c`` is tokenized whole, and the tokens
        after the longest prefix every candidate shares are scored, so a continuation whose first
        token merges with the prompt's last one is scored from the same context as the others.
        The candidates' remaining tokens run as one right-padded batch on the prefix's cache
        repeated per row: one forward instead of one per candidate, holding one copy of the
        prefix's cache per candidate at once. ``batch=False`` (or a cache without
        ``batch_repeat_interleave``) runs them one by one, each on its own copy: one copy held at
        a time, for a long prompt on a large model. With ``prefix_cache=True`` the prompt prefills
        only what it adds to the kept cache (a tool loop's transcript), and its cache is kept for
        the next call (`generate` of the reply that follows reuses it). `encode` (text -> ids)
        defaults to the generator's tokenizer without special tokens. The counters are not
        charged: callers account the returned token count as their protocol counts it.
        """
        import torch

        if not continuations:
            raise RheaConfigError("continuation_logprobs needs at least one continuation")
        if encode is None:
            encode = lambda text: list(self.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        full = [list(encode(prompt + c)) for c in continuations]
        shared = min(_common_prefix(list(encode(prompt)), ids) for ids in full)
        shared = min([shared] + [_common_prefix(full[0], ids) for ids in full[1:]])
        if shared == 0:
            raise RheaConfigError("continuation_logprobs: the prompt shares no token with its continuations; "
                                  "pass the rendered prompt text")
        model = self._backbone()
        device = next(model.parameters()).device
        cache_kw = self._cache_keyword(model)
        rests = [ids[shared:] for ids in full]
        scores = [0.0] * len(full)  # a continuation wholly inside the shared prefix adds nothing
        todo = [i for i, rest in enumerate(rests) if rest]
        prefix = full[0][:shared]
        start, reused = self._start_cache(model, prefix, 1) if self.prefix_cache else (None, 0)
        self.cached_prompt_tokens += reused
        with self._context(), torch.no_grad():
            try:
                head = model(input_ids=torch.tensor([prefix[reused:]], device=device), use_cache=True,
                             **({cache_kw: start} if start is not None else {}), **_last_logits_only(model))
            except BaseException:
                self.reset_prefix_cache()  # the kept cache may hold part of this prompt
                raise
            cache, last = head.get(cache_kw), head.logits[0, -1].float()
            if self.prefix_cache:  # the prompt's cache is kept for the next call; the candidates read copies
                self._cache, self._cache_ids = cache, list(prefix)
            if todo and batch and hasattr(cache, "batch_repeat_interleave"):
                width = max(len(rests[i]) for i in todo)
                rows = torch.tensor([rests[i] + [rests[i][-1]] * (width - len(rests[i])) for i in todo], device=device)
                if self.prefix_cache:
                    cache = copy.deepcopy(cache)
                if len(todo) > 1:
                    cache.batch_repeat_interleave(len(todo))
                # right padding: a causal row's real positions never see its pad tokens
                out = model(input_ids=rows, use_cache=True, **{cache_kw: cache})
                logp = torch.log_softmax(torch.cat([last[None, None].expand(len(todo), 1, -1),
                                                    out.logits[:, :-1].float()], 1), -1)
                for r, i in enumerate(todo):
                    n = len(rests[i])
                    scores[i] = float(logp[r, :n].gather(-1, rows[r, :n, None]).sum())
            else:
                for i in todo:
                    rest = torch.tensor([rests[i]], device=device)
                    out = model(input_ids=rest, use_cache=True, **{cache_kw: copy.deepcopy(cache)})
                    logits = torch.cat([last[None], out.logits[0, :-1].float()])
                    scores[i] = float(torch.log_softmax(logits, -1).gather(-1, rest[0, :, None]).sum())
        return scores, shared + sum(len(ids) - shared for ids in full)

    def _eos_ids(self) -> set[int]:
        ids = getattr(getattr(self._backbone(), "generation_config", None), "eos_token_id", None)
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if not ids and self.tokenizer.eos_token_id is not None:  # what generate() stops on
            ids = [self.tokenizer.eos_token_id]
        return set(ids)

    def _run(self, messages, n, max_new_tokens, temperature, stop) -> list[str]:
        import torch

        if not messages:
            raise RheaConfigError("generate() needs at least one message")
        enc = _chat_ids(self.tokenizer, messages)
        self.check_fits(int(enc["input_ids"].shape[1]), max_new_tokens)
        model = self._backbone()
        device = next(model.parameters()).device
        kwargs = self._generation_kwargs(max_new_tokens, stop)
        if n > 1:
            kwargs["num_return_sequences"] = n
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=0.95)
            if self.seed is not None:
                torch.manual_seed(self.seed)
                self.seed += 1
        cache = None
        if self.prefix_cache:
            ids = enc["input_ids"][0].tolist()
            cache, shared = self._start_cache(model, ids, n)
            if cache is not None:
                kwargs[self._cache_keyword(model)] = cache
            self.cached_prompt_tokens += shared * n
        try:
            with self._context(), torch.no_grad():
                out = model.generate(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device),
                                     **kwargs)
        except BaseException:
            self.reset_prefix_cache()  # the cache may hold part of this call
            raise
        if self.prefix_cache and n == 1:
            # the cache now holds the prompt and every generated token but the last
            self._cache = cache
            self._cache_ids = out[0].tolist()[: cache.get_seq_length()]
        n_prompt = int(enc["input_ids"].shape[1])
        return [self._finish_row(row, n_prompt, stop) for row in out[:, n_prompt:].tolist()]

    def _finish_row(self, row: list[int], n_prompt: int, stop) -> str:
        """One generated row as text (up to and including its first EOS: rows that ended early are
        padded to the longest), charged to the counters, cut at the first stop string."""
        eos = self._eos_ids()
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        self.prompt_tokens += n_prompt
        self.completion_tokens += end
        text = self.tokenizer.decode(row[:end], skip_special_tokens=True)
        for s in stop or ():
            cut = text.find(s)
            if cut >= 0:
                text = text[:cut]
        return text.strip()

    def _generation_kwargs(self, max_new_tokens: int, stop) -> dict:
        """Greedy `generate` settings every call shares (the `<mem>` token suppressed, stop strings)."""
        kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False,
                  "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id}
        mem_id = getattr(self.model, "mem_token_id", None)
        if mem_id is not None:
            kwargs["suppress_tokens"] = [mem_id]
        if stop:
            kwargs["stop_strings"] = list(stop)
            kwargs["tokenizer"] = self.tokenizer
        return kwargs

    def batch_key(self) -> tuple:
        """Generators with equal keys can answer in one batch (`generate_rows`): same model, tokenizer, adapter."""
        return (id(self.model), id(self.tokenizer), self.adapter)

    @staticmethod
    def generate_batch(generators: Sequence["HFGenerator"], conversations: Sequence[Sequence[Message]], *,
                       max_new_tokens: int = 256, stop: Sequence[str] | None = None) -> list[str]:
        """Greedy replies to `conversations[i]` for each i, decoded as one left-padded batch, each charged
        to `generators[i]`'s counters as its own `generate` call would be.

        Decoding on a memory-bound device costs about the same for a batch of rows as for one,
        so several sessions' controllers (e.g. K episodes' rolling summaries) that wait on the same
        model answer for about the price of one. The generators must share `batch_key()`; their
        prefix caches are neither read nor changed. Replies equal one-by-one greedy replies up to
        floating-point reassociation (padding changes reduction order).
        """
        import torch

        if len(generators) != len(conversations):
            raise RheaConfigError(f"generate_batch: {len(generators)} generators but {len(conversations)} conversations; "
                                  "pass one generator per conversation")
        if not generators:
            return []
        first = generators[0]
        if any(g.batch_key() != first.batch_key() for g in generators[1:]):
            raise RheaConfigError("generate_batch: the generators must share one model, tokenizer and adapter "
                                  "(group them by batch_key() first)")
        if any(not messages for messages in conversations):
            raise RheaConfigError("generate() needs at least one message")
        ids = [_chat_ids(first.tokenizer, messages)["input_ids"][0].tolist() for messages in conversations]
        width = max(len(row) for row in ids)
        first.check_fits(width, max_new_tokens)  # the longest row: a left-padded batch never runs past the window
        kwargs = first._generation_kwargs(max_new_tokens, stop)
        pad = kwargs["pad_token_id"]
        input_ids = torch.tensor([[pad] * (width - len(row)) + row for row in ids])
        mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids])
        model = first._backbone()
        device = next(model.parameters()).device
        with first._context(), torch.no_grad():
            out = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device), **kwargs)
        return [g._finish_row(row, len(prompt), stop) for g, row, prompt in zip(generators, out[:, width:].tolist(), ids)]


def _plain_decoding(model):
    """`rhea_kernels.decode_linears` over a plain HF model where it serves (fp32 on a CPU, kernel built), else
    nothing: what `RheaForCausalLM.decoding` does for a Rhea model."""
    import contextlib

    import torch

    from rhea_kernels.decode_linear import decode_linears, serves

    return decode_linears(model) if isinstance(model, torch.nn.Module) and serves(model) else contextlib.nullcontext()


def generate_rows(generators: Sequence[TextGenerator], conversations: Sequence[Sequence[Message]], *,
                  max_new_tokens: int = 256, stop: Sequence[str] | None = None) -> list[str]:
    """Greedy replies to `conversations[i]` from `generators[i]`, in order: generators that can share a
    batch (`HFGenerator`s over one model, tokenizer and adapter) decode together
    (`HFGenerator.generate_batch`); any other generator answers with its own `generate`.

    >>> generate_rows([ScriptedGenerator(["a"]), ScriptedGenerator(["b"])],
    ...               [[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]])
    ['a', 'b']
    """
    if len(generators) != len(conversations):
        raise RheaConfigError(f"generate_rows: {len(generators)} generators but {len(conversations)} conversations; "
                              "pass one generator per conversation")
    replies: list[str | None] = [None] * len(generators)
    groups: dict[tuple, list[int]] = {}
    for i, g in enumerate(generators):
        if isinstance(g, HFGenerator):
            groups.setdefault(g.batch_key(), []).append(i)
        else:
            replies[i] = g.generate(conversations[i], max_new_tokens=max_new_tokens, stop=stop)
    for rows in groups.values():
        texts = HFGenerator.generate_batch([generators[i] for i in rows], [conversations[i] for i in rows],
                                           max_new_tokens=max_new_tokens, stop=stop)
        for i, text in zip(rows, texts):
            replies[i] = text
    return replies  # type: ignore[return-value]


def _last_logits_only(model) -> dict:
    """``{"logits_to_keep": 1}`` where `model` (or the model a PEFT wrapper holds) takes it: a prefill whose
    next-token distribution alone is read skips the LM head on every other position (on Qwen2.5-1.5B a
    1,000-token prompt's full logits are 0.6 GB and ~15% of the prefill's multiply-adds)."""
    for candidate in (model, getattr(model, "get_base_model", lambda: None)()):
        if candidate is not None and "logits_to_keep" in inspect.signature(candidate.forward).parameters:
            return {"logits_to_keep": 1}
    return {}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class OpenAICompatibleGenerator:
    """A chat-completions endpoint (vLLM, llama.cpp server, OpenAI, …) as a `TextGenerator`.

    Uses only the standard library. Reads the key from `api_key` or ``$OPENAI_API_KEY``.

    >>> judge = OpenAICompatibleGenerator("http://127.0.0.1:8000/v1", model="qwen")  # doctest: +SKIP
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 120.0):
        import os

        if not base_url.startswith(("http://", "https://")):
            raise RheaConfigError(f"base_url={base_url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def chat(self, messages, **params) -> dict:
        """POST /chat/completions and return the parsed JSON response."""
        import json
        import urllib.error
        import urllib.request

        body = json.dumps({"model": self.model, "messages": list(messages), **params}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read().decode())
        except urllib.error.URLError as e:
            raise ConnectionError(f"chat completion at {self.base_url} failed: {e}") from e
        usage = data.get("usage") or {}
        self.prompt_tokens += int(usage.get("prompt_tokens", 0))
        self.completion_tokens += int(usage.get("completion_tokens", 0))
        return data

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        params = {"max_tokens": max_new_tokens, "temperature": temperature}
        if stop:
            params["stop"] = list(stop)
        data = self.chat(messages, **params)
        try:
            return (data["choices"][0]["message"].get("content") or "").strip()
        except (KeyError, IndexError, TypeError) as e:
            raise RheaConfigError(f"unexpected chat-completion response from {self.base_url}: {str(data)[:300]}") from e
