"""`ChatSession`: a model, a context policy and the conversation, one `send()` per turn."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rhea.context import Conversation, ContextPlan, Turn, check_message, fit_plan
from rhea.context.budget import TokenBudget, budget_of, with_max_new_tokens
from rhea.errors import RheaConfigError, RheaError, require_text
from rhea.policies import DEFAULT_POLICY, ContextPolicy, policy_class
from rhea.session.generation import Generation, generate_from_plan
from rhea.session.history_cache import HistoryKVCache

SESSION_JSON = "session.json"
SESSION_TENSORS = "session.safetensors"
MAX_MESSAGE_CHARS = 200_000


class SessionError(RheaError, ValueError):
    """A session file is missing, corrupt, or does not fit the model it is loaded onto."""


class MessageError(RheaConfigError):
    """A chat message cannot be used as given (invalid UTF-8 bytes, unpaired surrogates, too long)."""


@dataclass
class TurnRecord:
    """What one turn cost and decided (the plan itself stays in `ChatSession.last_plan`)."""

    turn: int
    policy: str
    prompt_tokens: int
    latent_slots: int
    new_tokens: int
    full_history_tokens: int
    tiers: dict[str, int]
    timings: dict[str, float] = field(default_factory=dict)
    #: Text tokens + latent slots of the plan, counted like `full_history_tokens` (content only,
    #: no chat-template tokens), so the two compare; None in sessions saved before it existed.
    content_tokens: int | None = None
    #: Bytes the session held once the turn was done: the history cache's keys/values (and its
    #: latent rows) plus the policy's stored latents (`ChatSession.bytes_held`); None in sessions
    #: saved before it existed.
    bytes_held: int | None = None


@dataclass
class TurnTrace:
    """What a turn observer sees once a turn is done: its record, the plan, the generation and the turn."""

    record: TurnRecord
    plan: ContextPlan
    generation: Generation
    turn: Turn


@dataclass
class StagedTurn:
    """A planned turn not yet answered (`ChatSession.begin_turn`): the message, its plan and what
    planning cost; `answered` is the policy's own answer when it made one (Sculptor's loop)."""

    text: str
    plan: ContextPlan
    t_plan: float
    work_before: dict[str, float]
    work_planned: dict[str, float]
    answered: str | None = None


#: Called with the `TurnTrace` of every finished turn (see `ChatSession.add_observer`).
TurnObserver = Callable[[TurnTrace], None]


def _work(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """How much of each of a policy's `counters` happened between two readings."""
    return {k: after[k] - before.get(k, 0) for k in after}


class ChatSession:
    """Chat with `model` while `policy` decides the context of every turn.

    >>> from rhea import load_default_model                            # doctest: +SKIP
    >>> model, tok = load_default_model()                               # doctest: +SKIP
    >>> chat = ChatSession(model, policy="rhea")                        # doctest: +SKIP
    >>> chat.send("From now on, answer in one sentence.")               # doctest: +SKIP
    >>> chat.last_plan.decisions.instructions                           # doctest: +SKIP
    ['From now on, answer in one sentence.']
    >>> chat.save("session-dir"); chat = ChatSession.load("session-dir", model)  # doctest: +SKIP

    reuse_prefix_cache: keep the keys/values of the last prompt and reply (`HistoryKVCache`) and
    prefill only what follows the next prompt's common prefix with them: the instruction block
    (Rhea's instructional memory) and every earlier turn the policy left unchanged, while the
    adapter, model and weights stay the same. Greedy replies are the same either way (up to
    the last bits of a prefill split in two); the cache is dropped on `set_policy`,
    `invalidate_prefix_cache` and `load`, and costs the keys/values of one prompt.
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        policy: str | ContextPolicy = DEFAULT_POLICY,
        *,
        max_new_tokens: int = 128,
        adapter: str = "auto",
        policy_kwargs: dict | None = None,
        generation_kwargs: dict | None = None,
        reuse_prefix_cache: bool = True,
    ):
        if not hasattr(model, "compress") or not hasattr(model, "generate"):
            raise TypeError(
                f"ChatSession needs a RheaForCausalLM, got {type(model).__name__}; wrap a Hugging Face model with "
                "RheaForCausalLM.from_base(model, tokenizer)"
            )
        if adapter not in ("auto", "generate", "base"):
            raise RheaConfigError(f"adapter={adapter!r} must be 'auto', 'generate' or 'base'")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise RheaConfigError(f"max_new_tokens={max_new_tokens!r} must be an int >= 1")
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        self.max_new_tokens = max_new_tokens
        self.adapter = adapter
        self.generation_kwargs = dict(generation_kwargs or {})
        if not isinstance(reuse_prefix_cache, bool):
            raise TypeError(f"reuse_prefix_cache={reuse_prefix_cache!r} must be True or False")
        self.prefix_cache: HistoryKVCache | None = HistoryKVCache() if reuse_prefix_cache else None
        self.conversation = Conversation()
        self.records: list[TurnRecord] = []
        self.last_plan: ContextPlan | None = None
        self.last_generation: Generation | None = None
        self.observers: list[TurnObserver] = []
        #: the window less max_new_tokens and the chat template's own tokens (None: the model declares no window)
        self.token_budget: TokenBudget | None = budget_of(model, max_new_tokens, self.tokenizer)
        self.policy = self._make_policy(policy, policy_kwargs or {})

    # ---------------------------------------------------------------- policy
    def _make_policy(self, policy: str | ContextPolicy, kwargs: dict) -> ContextPolicy:
        if isinstance(policy, ContextPolicy):
            return policy
        if not isinstance(policy, str):
            raise TypeError(f"policy must be a registered name or a ContextPolicy, got {type(policy).__name__}")
        cls = policy_class(policy)
        if cls.model_arg is not None:
            kwargs = {cls.model_arg: self.model, **kwargs}
        elif cls.controller_arg is not None and cls.controller_arg not in kwargs:
            from rhea.backends.llm import HFGenerator

            # LLM-driven controllers default to the session's own model with adapters disabled
            kwargs = {cls.controller_arg: HFGenerator(self.model), **kwargs}
        kwargs.setdefault("tokenizer", self.tokenizer)
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise RheaConfigError(f"policy {policy!r} could not be built with {sorted(kwargs)}: {e}") from e

    def set_policy(self, policy: str | ContextPolicy, **policy_kwargs) -> None:
        """Switch policy mid-conversation; the new policy catches up on the turns so far.

        A policy with an instructional memory re-reads every past user message with its
        recognizer, so global instructions given before the switch (and their revocations)
        carry over; `observe` alone only sees the turns' text.
        """
        new = self._make_policy(policy, policy_kwargs)
        new.reset()
        new.catch_up(self.conversation)
        self.policy = new
        self.invalidate_prefix_cache()

    def invalidate_prefix_cache(self) -> None:
        """Drop the cached prompt and reply (a changed prompt, adapter or weights is detected
        anyway; call this after swapping weights in some way the detection cannot see)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def _adapter_for(self, plan: ContextPlan) -> str:
        if self.adapter != "auto":
            return self.adapter
        if plan.latents() or self.policy.adapter == "generate":
            return "generate"
        return "base"  # text baselines answer with the plain model, as in the paper

    def add_observer(self, observer: TurnObserver) -> TurnObserver:
        """Call `observer(trace)` after every turn with its `TurnTrace` (record with timings, plan,
        generation); returns it, so `remove_observer` can take it off again.

        >>> from rhea.testing import tiny_rhea
        >>> chat, seen = ChatSession(tiny_rhea(), policy="vanilla", max_new_tokens=2), []
        >>> _ = chat.add_observer(lambda trace: seen.append(trace.record.turn))
        >>> _ = chat.send("hi"); _ = chat.send("and again")
        >>> seen
        [0, 1]
        """
        if not callable(observer):
            raise TypeError(f"observer must be callable with a TurnTrace, got {type(observer).__name__}")
        self.observers.append(observer)
        return observer

    def remove_observer(self, observer: TurnObserver) -> None:
        self.observers.remove(observer)

    # ---------------------------------------------------------------- turns
    def _check_message(self, text: str | bytes) -> str:
        if isinstance(text, (bytes, bytearray)):  # documented: bytes must be UTF-8
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                raise MessageError(
                    f"message bytes are not valid UTF-8 ({e.reason} at byte {e.start}); decode them with the right "
                    "encoding and pass a str"
                ) from e
        text = require_text(text, "message")
        if len(text) > MAX_MESSAGE_CHARS:
            raise MessageError(
                f"message has {len(text):,} characters (limit {MAX_MESSAGE_CHARS:,}); split it into several messages"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: bytes decoded with errors="surrogateescape"
            raise MessageError(
                f"message holds an unpaired surrogate {text[e.start]!r} at character {e.start} (a str decoded with "
                "errors='surrogateescape' or 'surrogatepass'); decode the original bytes with their real encoding, "
                "or with errors='replace'"
            ) from None
        return text

    def send(self, text: str, *, on_text: Callable[[str], None] | None = None) -> str:
        """Answer `text` under the policy; record the turn; return the reply.

        `text` is a str (bytes are decoded as UTF-8). Invalid UTF-8, unpaired surrogates and messages
        over `MAX_MESSAGE_CHARS` (`MessageError`) and blank messages are rejected before anything is recorded.
        """
        staged = self.begin_turn(text)
        if staged.answered is not None:  # the policy's own loop already answered (Sculptor): don't generate twice
            if on_text is not None:
                on_text(staged.answered)
            gen = self._answered_generation(staged)
        else:
            gen = generate_from_plan(
                self.model, staged.plan, max_new_tokens=self.max_new_tokens, adapter=self._adapter_for(staged.plan),
                on_text=on_text, prefix_cache=self.prefix_cache, **self.generation_kwargs,
            )
        return self.end_turn(staged, gen)

    def ask(self, text: str) -> str:
        """Answer `text` from the conversation so far without adding the exchange to it: the policy
        plans as for `send` (its own state, e.g. a kept plan or a recognized instruction, carries on)
        but does not observe the reply, so several questions about one history are each answered from
        that history alone. The turn is recorded (`records`, observers) like any other.

        >>> from rhea.testing import tiny_rhea
        >>> chat = ChatSession(tiny_rhea(), policy="vanilla", max_new_tokens=2)
        >>> _ = chat.send("hi"); _ = chat.ask("what did I say?"); len(chat.conversation)
        1
        """
        staged = self.begin_turn(text)
        if staged.answered is not None:
            gen = self._answered_generation(staged)
        else:
            gen = generate_from_plan(
                self.model, staged.plan, max_new_tokens=self.max_new_tokens, adapter=self._adapter_for(staged.plan),
                prefix_cache=self.prefix_cache, **self.generation_kwargs,
            )
        return self.end_turn(staged, gen, keep=False)

    def budget_for(self, max_new_tokens: int | None = None) -> TokenBudget | None:
        """The token budget of a reply of `max_new_tokens` (default: the session's own)."""
        budget = self.token_budget
        if budget is not None and budget.max_new_tokens != self.max_new_tokens:  # max_new_tokens was set since
            budget = self.token_budget = with_max_new_tokens(budget, self.max_new_tokens)
        return with_max_new_tokens(budget, max_new_tokens or self.max_new_tokens)

    def check_fits(self, text: str, max_new_tokens: int | None = None) -> None:
        """`ContextWindowError` when `text` alone, as the query, cannot fit the model's window with a reply
        of `max_new_tokens`; no model work is done (a tokenizer pass)."""
        budget = self.budget_for(max_new_tokens)
        if budget is not None:
            check_message(text, budget, self.tokenizer)

    def begin_turn(self, text: str, *, max_new_tokens: int | None = None) -> "StagedTurn":
        """The first half of `send`: check `text` and plan the context (nothing recorded yet).

        The plan fits the model's window less `max_new_tokens` (default: the session's): the policy
        plans within `policy.token_budget`, and `rhea.context.fit_plan` cuts or drops past turns it
        still has to, lowest priority first, each with its reason recorded (a plan the policy answered
        while planning too). The agents fit their own inner prompts to their generators' windows
        (`rhea.context.budget.fit_prompt`, ``inner_budget`` records). A message that alone cannot
        fit raises `ContextWindowError` before the policy or the model does any work.

        With `end_turn`, lets a caller generate the reply itself, e.g. several sessions' turns
        in one batch (`rhea.session.batch.send_batch`).
        """
        text = self._check_message(text)
        budget = self.budget_for(max_new_tokens)
        if budget is not None:
            check_message(text, budget, self.tokenizer)
        self.policy.token_budget = budget
        work_before = self.policy.counters()
        t0 = time.perf_counter()
        plan = self.policy.build(self.conversation, text)
        answered = self.policy.planned_answer(plan)
        # a plan answered while planning (Sculptor) is fitted too: the context it records is one the window holds
        plan = fit_plan(plan, budget, self.tokenizer)
        t_plan = time.perf_counter() - t0
        return StagedTurn(text, plan, t_plan, work_before, self.policy.counters(), answered)

    def _answered_generation(self, staged: "StagedTurn") -> Generation:
        plan, answered = staged.plan, staged.answered
        return Generation(answered, prompt_tokens=plan.ledger.text_tokens, latent_slots=plan.ledger.latent_slots,
                          new_tokens=len(self.tokenizer(answered, add_special_tokens=False)["input_ids"]),
                          timings={"render_s": 0.0, "prefill_s": 0.0, "decode_s": 0.0})

    def end_turn(self, staged: "StagedTurn", gen: Generation, *, observed_s: float | None = None,
                 keep: bool = True) -> str:
        """The second half of `send`: observe the reply `gen`, record the turn, notify observers.

        `observed_s`: the policy has already observed this turn (several sessions' turns observed
        together, `send_batch`), taking that many seconds; it is recorded, not observed again.
        `keep`: False leaves the exchange out of the conversation and unobserved (`ask`).
        """
        plan = staged.plan
        turn = Turn(staged.text, gen.text)
        t1 = time.perf_counter()
        if observed_s is None and keep:
            self.policy.observe(turn)  # Rhea compresses the new reply here, once
        t_observe = time.perf_counter() - t1 if observed_s is None else float(observed_s)
        work = _work(staged.work_before, self.policy.counters())  # e.g. compress_calls, compress_s (the whole turn)
        work.update({f"plan_{k}": v for k, v in _work(staged.work_before, staged.work_planned).items()})  # ... in planning alone
        if keep:
            self.conversation.append(turn)
        tiers: dict[str, int] = {}
        for d in plan.decisions.turns:
            tiers[d.tier] = tiers.get(d.tier, 0) + 1
        record = TurnRecord(
            turn=len(self.conversation) - keep, policy=self.policy.name, prompt_tokens=gen.prompt_tokens,
            latent_slots=gen.latent_slots, new_tokens=gen.new_tokens,
            full_history_tokens=plan.ledger.full_history_tokens, tiers=tiers,
            content_tokens=plan.ledger.text_tokens + plan.ledger.latent_slots,
            timings={"plan_s": staged.t_plan, **gen.timings, "observe_s": t_observe, **work},
            bytes_held=sum(self.bytes_held().values()),
        )
        self.records.append(record)
        self.last_plan, self.last_generation = plan, gen
        for observer in list(self.observers):
            observer(TurnTrace(record, plan, gen, turn))
        return gen.text

    def stream(self, text: str) -> Iterator[str]:
        """Like `send`, yielding the reply in pieces as they are generated."""
        import queue
        import threading

        pieces: queue.Queue = queue.Queue()
        done = object()
        error: list[BaseException] = []

        def work():
            try:
                self.send(text, on_text=pieces.put)
            except BaseException as e:  # re-raised in the caller's thread
                error.append(e)
            finally:
                pieces.put(done)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        while (item := pieces.get()) is not done:
            yield item
        thread.join()
        if error:
            raise error[0]

    def bytes_held(self) -> dict[str, int]:
        """Memory this conversation holds now, in bytes: ``kv_cache`` (the keys/values `HistoryKVCache`
        keeps of the last prompt and reply, with its latent rows, plus any cache the policy builds
        itself, `ContextPolicy.held_bytes`: a kvpress press's pruned cache), ``latents`` (every reply's
        latent the policy stores, e.g. `EpisodicMemory`'s) and ``instructions`` (the UTF-8 text of the
        instruction block an instructional memory renders, e.g. Rhea's)."""
        from rhea.context import tensor_bytes

        kv = 0
        if self.prefix_cache is not None:
            kv = tensor_bytes(getattr(self.prefix_cache, "_kv", None)) + \
                tensor_bytes(getattr(self.prefix_cache, "_latents", None))
        episodic = getattr(self.policy, "episodic", None)
        latents = sum(tensor_bytes(e.latents) for e in getattr(episodic, "entries", ()) or ())
        im = getattr(self.policy, "im", None)
        instructions = len(im.render().encode("utf-8")) if hasattr(im, "render") else 0
        held = {"kv_cache": kv, "latents": latents, "instructions": instructions}
        for kind, n in self.policy.held_bytes().items():
            held[kind] = held.get(kind, 0) + int(n)
        return held

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike, *, wait: bool = True) -> Path:
        """Write ``session.json`` (conversation, policy state, records), ``session.safetensors`` (latents)
        and ``manifest.json`` (the SHA-256 of both) into the directory `path`.

        The save is atomic: the files go to a new directory beside `path`, which then replaces it, so a
        kill at any point leaves the previous save or this one. Saves to one path are serialized by a
        lock file beside it (``wait=False`` raises `rhea.storage.SaveInProgressError` instead of waiting).
        """
        from safetensors.torch import save

        from rhea.session.tensors import split_tensors
        from rhea.storage import replace_directory, sha256_bytes

        path = Path(path)
        state, tensors = split_tensors(self.policy.state_dict(), "policy")
        payload = {
            "format": SESSION_FORMAT,
            "conversation": json.loads(self.conversation.to_json()),
            "policy": state,
            "records": [asdict(r) for r in self.records],
            "max_new_tokens": self.max_new_tokens,
            "adapter": self.adapter,
            "generation_kwargs": self.generation_kwargs,
            "reuse_prefix_cache": self.prefix_cache is not None,
            "model": {"hidden_size": self.model.hidden_size, "n_mem": self.model.n_mem,
                      "latent_width": self.model.latent_width, "base_model": self.model.config.base_model},
        }
        files = {SESSION_JSON: json.dumps(payload, indent=1, ensure_ascii=False).encode("utf-8"),
                 SESSION_TENSORS: save(tensors)}
        manifest = {"format": MANIFEST_FORMAT,
                    "files": {name: {"sha256": sha256_bytes(data), "bytes": len(data)} for name, data in files.items()}}
        files[SESSION_MANIFEST] = json.dumps(manifest, indent=1).encode("utf-8")

        def fill(directory: Path) -> None:
            for name, data in files.items():
                (directory / name).write_bytes(data)

        return replace_directory(path, fill, wait=wait, names={SESSION_JSON, SESSION_TENSORS, SESSION_MANIFEST})

    @classmethod
    def load(cls, path: str | os.PathLike, model, *, policy_kwargs: dict | None = None,
             verify: bool = True) -> "ChatSession":
        """Restore a session written by `save` onto `model` (same hidden size and n_mem).

        Every problem with the folder is a `SessionError` naming it: a missing file, a file whose
        SHA-256 differs from the one ``manifest.json`` recorded at save time (``verify=False`` skips
        that check; sessions saved without a manifest are not checked), or a ``session.json`` that
        does not hold what `save` writes.
        """
        from safetensors.torch import load as load_tensors

        from rhea.session.tensors import join_tensors
        from rhea.storage import readable_directory, sha256_bytes

        path = readable_directory(Path(path), SESSION_JSON)
        if not path.is_dir():
            raise SessionError(f"{path} is not a saved session (no such directory); save one with ChatSession.save")
        raw: dict[str, bytes] = {}
        for name in (SESSION_JSON, SESSION_TENSORS):
            try:
                raw[name] = (path / name).read_bytes()
            except FileNotFoundError:
                raise SessionError(f"{path} is not a saved session ({name} missing); save one with "
                                   "ChatSession.save") from None
            except OSError as e:
                raise SessionError(f"{path}/{name} cannot be read ({e.strerror or e})") from None
        if verify:
            _verify_manifest(path, raw)
        try:
            payload = json.loads(raw[SESSION_JSON].decode("utf-8"))
        except RecursionError:
            raise SessionError(f"{path}/{SESSION_JSON} nests objects or arrays too deeply to read; the session is "
                               "corrupted, restore it from a copy or start a new one") from None
        except ValueError as e:  # not UTF-8, not JSON, or an integer of more digits than Python converts
            raise SessionError(f"{path}/{SESSION_JSON} is not valid JSON ({e}); the session is corrupted, "
                               "restore it from a copy or start a new one") from None
        _check_payload(path, payload)
        try:
            tensors = load_tensors(raw[SESSION_TENSORS])
        except Exception as e:  # safetensors raises its own SafetensorError on a damaged header
            raise SessionError(f"{path}/{SESSION_TENSORS} is not a valid safetensors file ({type(e).__name__}: "
                               f"{e}); the session is corrupted, restore it from a copy") from None
        bad_latents = [name for name, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]
        if bad_latents:
            raise SessionError(f"{path}/{SESSION_TENSORS} holds non-finite values (NaN or inf) in {bad_latents[0]}; the "
                               "session is corrupted, restore it from a copy")
        saved = payload["model"]
        width = saved.get("latent_width", saved["hidden_size"])  # sessions saved before latent_width
        if (saved["hidden_size"], saved["n_mem"], width) != (model.hidden_size, model.n_mem, model.latent_width):
            raise SessionError(
                f"{path} was saved with a model of hidden size {saved['hidden_size']}, n_mem {saved['n_mem']} and "
                f"latent width {width} ({saved.get('base_model')}); this model has {model.hidden_size}, "
                f"{model.n_mem} and {model.latent_width} (latent_injection={model.config.latent_injection!r})"
            )
        try:
            policy_state = join_tensors(payload["policy"], tensors)
            session = cls(model, policy=policy_state["name"], max_new_tokens=payload["max_new_tokens"],
                          adapter=payload["adapter"], generation_kwargs=payload["generation_kwargs"],
                          reuse_prefix_cache=payload.get("reuse_prefix_cache", True),
                          policy_kwargs={**policy_state.get("config", {}), **(policy_kwargs or {})})
            session.policy.load_state_dict(policy_state)
            session.conversation = Conversation.from_json(json.dumps(payload["conversation"]))
            session.records = [TurnRecord(**r) for r in payload["records"]]
        except SessionError:
            raise
        except (RheaError, KeyError, TypeError, AttributeError, ValueError, IndexError, RuntimeError) as e:
            raise SessionError(f"{path}/{SESSION_JSON} does not hold a session this version can restore "
                               f"({type(e).__name__}: {e}); it was altered or written by another program") from e
        return session


SESSION_FORMAT = "rhea-session/1"
SESSION_MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rhea-manifest/1"
_NUMERIC_GENERATION = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repetition_penalty", "num_beams",
                       "length_penalty", "no_repeat_ngram_size")
_RECORD_FIELDS = {f.name: f for f in TurnRecord.__dataclass_fields__.values()}


def _verify_manifest(path: Path, raw: dict[str, bytes]) -> None:
    """Refuse a folder whose files are not the ones its save wrote (a mix of two saves, a flipped bit)."""
    from rhea.storage import sha256_bytes

    try:
        manifest = json.loads((path / SESSION_MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return  # saved before manifests were written: nothing recorded to check against
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not UTF-8, not JSON, a huge integer
        reason = "it nests too deeply" if isinstance(e, RecursionError) else str(e)
        raise SessionError(f"{path}/{SESSION_MANIFEST} cannot be read ({reason}); the session is corrupted, restore "
                           "it from a copy (or load with verify=False to skip the digest check)") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise SessionError(f"{path}/{SESSION_MANIFEST} is not a rhea manifest ({MANIFEST_FORMAT!r} with a 'files' "
                           "object); restore the session from a copy")
    for name, data in raw.items():
        entry = files.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise SessionError(f"{path}/{SESSION_MANIFEST} records no SHA-256 for {name}; restore the session "
                               "from a copy")
        if sha256_bytes(data) != entry["sha256"]:
            raise SessionError(
                f"{path}/{name} is not the file its save wrote (SHA-256 {sha256_bytes(data)[:16]}…, the manifest "
                f"records {entry['sha256'][:16]}…): the session is corrupted (altered, or a mix of files of "
                "two saves); restore it from a copy (or load with verify=False to skip the digest check)")


def _check_payload(path: Path, payload: Any) -> None:
    """Raise `SessionError` naming the first field of a ``session.json`` that `save` would not write."""
    where = f"{path}/{SESSION_JSON}"

    def bad(what: str) -> SessionError:
        return SessionError(f"{where}: {what}; the file was altered or written by another program, restore it "
                            "from a copy or start a new session")

    def is_int(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(payload, dict):
        raise bad(f"holds a JSON {type(payload).__name__}, not an object")
    if payload.get("format") != SESSION_FORMAT:
        raise SessionError(f"{where}: unknown session format {payload.get('format')!r} (this version reads "
                           f"{SESSION_FORMAT!r})")
    kinds = {"conversation": dict, "policy": dict, "records": list, "model": dict, "adapter": str,
             "generation_kwargs": dict}
    for key, kind in kinds.items():
        if key not in payload:
            raise bad(f"the field {key!r} is missing")
        if not isinstance(payload[key], kind):
            raise bad(f"{key!r} must be a JSON {kind.__name__.replace('dict', 'object').replace('str', 'string')}, "
                      f"got {type(payload[key]).__name__}")
    if not is_int(payload.get("max_new_tokens")) or payload["max_new_tokens"] < 1:
        raise bad(f"'max_new_tokens' must be an int >= 1, got {payload.get('max_new_tokens')!r}")
    if not isinstance(payload.get("reuse_prefix_cache", True), bool):
        raise bad(f"'reuse_prefix_cache' must be true or false, got {payload['reuse_prefix_cache']!r}")
    model = payload["model"]
    for key in ("hidden_size", "n_mem"):
        if not is_int(model.get(key)) or model[key] < 1:
            raise bad(f"model.{key} must be an int >= 1, got {model.get(key)!r}")
    if "latent_width" in model and (not is_int(model["latent_width"]) or model["latent_width"] < 1):
        raise bad(f"model.latent_width must be an int >= 1, got {model['latent_width']!r}")
    policy = payload["policy"]
    if not isinstance(policy.get("name"), str):
        raise bad(f"policy.name must be a policy name, got {policy.get('name')!r}")
    if not isinstance(policy.get("config", {}), dict) or not isinstance(policy.get("state", {}), dict):
        raise bad("policy.config and policy.state must be JSON objects")
    from transformers import GenerationConfig

    defaults = GenerationConfig()
    for key, value in payload["generation_kwargs"].items():
        if not hasattr(defaults, key):
            raise bad(f"generation_kwargs.{key} is not a generation option (transformers.GenerationConfig has none "
                      "of that name)")
        if key in _NUMERIC_GENERATION and (isinstance(value, bool) or not isinstance(value, (int, float))
                                           or not math.isfinite(value) or value < 0):
            raise bad(f"generation_kwargs.{key}={value!r} must be a number >= 0")
        if key == "do_sample" and not isinstance(value, bool):
            raise bad(f"generation_kwargs.do_sample={value!r} must be true or false")
    turns = payload["conversation"].get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise bad("conversation.turns must be a list of turn objects")
    required = {n for n, f in _RECORD_FIELDS.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    for i, record in enumerate(payload["records"]):
        if not isinstance(record, dict):
            raise bad(f"records[{i}] must be an object, got {type(record).__name__}")
        missing, unknown = sorted(required - set(record)), sorted(set(record) - set(_RECORD_FIELDS))
        if missing or unknown:
            raise bad(f"records[{i}] " + (f"lacks {', '.join(missing)}" if missing else
                                          f"has unknown fields {', '.join(unknown)}"))
