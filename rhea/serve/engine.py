"""The model's one worker: a bounded queue in front, requests rebuilt from their messages,
answered one by one (streams) or several per generation batch.

One thread owns the model (torch generation is not re-entrant); the HTTP layer only queues
jobs and awaits their futures. A full queue raises `QueueFullError` at once (503 +
Retry-After) instead of letting clients hang. Waiting non-streaming jobs with the same
generation settings are planned one after another and generated together
(`rhea.session.batch.generate_batch`), up to ``max_batch`` rows; when a non-streaming job finds
too few fellows waiting, the worker waits up to ``batch_wait_ms`` for more (a burst of clients
answered together comes back together).

Rebuilding: the engine keeps one `ChatSession` (its policy and the caches wrapped around it)
and, for every request, resets the policy and replays the past turns exactly as
`ChatSession.set_policy` catches a new policy up (the recognizer reads every past user
message into the instructional memory; `observe` sees every turn), then plans the query with
`ChatSession.begin_turn`. So the plan is the one a `ChatSession` would make after those turns.
"""
from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rhea.context import ContextOverflowError, ContextPlan, Conversation, render
from rhea.errors import RheaError
from rhea.serve.cache import (CachedCompress, CachedEmbedder, CachedRecognizer, HistoryPool, LatentStore, PrefixPool,
                              adapter_digest)
from rhea.serve.errors import APIError, QueueFullError, ServeConfigError
from rhea.serve.protocol import ChatRequest

log = logging.getLogger("rhea.serve")


class StopFilter:
    """Cuts a streamed reply at the first stop string and holds back what could still be one,
    plus leading/trailing whitespace, so the streamed text equals the final reply.

    >>> f = StopFilter(["END"]); out = f.feed(" Hello E") + f.feed("ND more"); out + f.finish(), f.stopped
    ('Hello', True)
    """

    def __init__(self, stop: list[str]):
        self.stop = list(stop)
        self.text = ""  # everything received
        self.sent = 0  # characters of the (left-stripped) text already emitted
        self.stopped = False

    def _visible(self) -> str:
        text = self.text.lstrip()
        for s in self.stop:
            at = text.find(s)
            if at >= 0:
                text, self.stopped = text[:at], True
        return text

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        self.text += piece
        text = self._visible()
        if self.stopped:
            safe = len(text.rstrip())
        else:
            hold = max((len(s) - 1 for s in self.stop), default=0)
            safe = min(len(text) - hold, len(text.rstrip()))
        if safe <= self.sent:
            return ""
        out, self.sent = text[self.sent:safe], safe
        return out

    def final(self) -> str:
        return self._visible().rstrip()

    def finish(self) -> str:
        """What is still held back once generation ended."""
        text = self.final()
        out, self.sent = text[self.sent:], len(text)
        return out


def _resolve(future: concurrent.futures.Future, value=None, *, error: BaseException | None = None) -> None:
    """Resolve `future` with `value` (or fail it with `error`) unless it is already resolved (a job answered 503
    by `Engine.close`)."""
    if future.done():
        return
    try:
        future.set_result(value) if error is None else future.set_exception(error)
    except concurrent.futures.InvalidStateError:  # resolved by another thread in between
        pass


@dataclass
class Job:
    request: ChatRequest
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    on_event: Callable[[str, Any], None] | None = None  # streaming: ("start" | "text", payload)
    enqueued: float = field(default_factory=time.perf_counter)
    #: set when the client has gone (or the server stops): the worker skips or stops the job
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: the request within the limits (`Engine._bounded`), fixed when the worker first takes the job
    bounded: ChatRequest | None = None
    #: its cacheable work not done yet (`Engine._prepare`): one callable per reply to compress or message to read
    pending: deque | None = None


# ---------------------------------------------------------------- bounded work per request
#: defaults of the request limits (`rhea serve --max-messages/--max-body-bytes/--max-history-tokens/--max-compressions`)
DEFAULT_MAX_MESSAGES = 1000
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_HISTORY_TOKENS = 500_000
DEFAULT_MAX_COMPRESSIONS = 64


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask of the server: messages, body bytes, history tokens (every message
    counted with the model's tokenizer), and past replies compressed anew (cached latents are free;
    older uncompressed turns beyond the limit are dropped, with the reason recorded)."""

    max_messages: int = DEFAULT_MAX_MESSAGES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_history_tokens: int = DEFAULT_MAX_HISTORY_TOKENS
    max_compressions: int = DEFAULT_MAX_COMPRESSIONS

    def __post_init__(self) -> None:
        for name in ("max_messages", "max_body_bytes", "max_history_tokens", "max_compressions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ServeConfigError(f"--{name.replace('_', '-')} {v!r} must be an int >= 1")


class RequestCancelled(RheaError):
    """The client went away (or the server is stopping) before its request was answered."""


class _StopWhenCancelled:
    """A `transformers` stopping criterion that ends generation once the job is cancelled."""

    def __init__(self, job: Job):
        self.job = job

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), self.job.cancelled.is_set(), dtype=torch.bool,
                          device=input_ids.device)


@dataclass
class Answer:
    """A finished request: the reply, why it ended, token counts, and the plan behind it."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    plan: ContextPlan
    conversation: Conversation
    timings: dict = field(default_factory=dict)


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def rhea_usage(answer: Answer, policy: str, *, trace: bool = False) -> dict:
    """The response's ``rhea`` object: tokens fed vs the full history, the instruction block and
    each past turn's tier and score, read from the plan's own decisions and ledger."""
    plan, led = answer.plan, answer.plan.ledger
    # turns dropped to bound the work (--max-compressions) precede the plan's first turn
    offset = next((r["dropped_oldest_turns"] for r in plan.decisions.records if r.get("event") == "bounded_work"), 0)
    turns = []
    for d in plan.decisions.turns:
        user = answer.conversation[d.turn + offset].user
        row = {"index": d.turn + offset, "user": user if len(user) <= 80 else user[:79] + "…", "tier": d.tier,
               "score": d.score, "components": dict(d.components)}
        if trace:
            row["note"] = d.note
        turns.append(row)
    out = {"policy": policy, "tokens_fed": led.text_tokens + led.latent_slots,
           "tokens_full_history": led.full_history_tokens, "tokens_saved": led.saved_tokens,
           "instructions": list(plan.decisions.instructions), "turns": turns}
    budget = next((r for r in reversed(plan.decisions.records) if r.get("event") == "budget"), None)
    if budget is not None:  # the window the prompt was fitted to, and what had to give way
        out["budget"] = {k: v for k, v in budget.items() if k != "event"}
    if trace:
        out["records"] = list(plan.decisions.records)
        out["timings"] = dict(answer.timings)
    return _finite(out)


#: The in-memory latent cache's default bound: 1 GiB (about 640 latents of SmolLM2-135M's `states`
#: compressor, 1.66 MB each; `rhea.context.latent_bytes`).
DEFAULT_CACHE_BYTES = 1 << 30


class Engine:
    """Owns the model, the policy, the caches and the worker thread.

    >>> from rhea.testing import tiny_rhea
    >>> from rhea.serve.protocol import parse_request
    >>> engine = Engine(tiny_rhea(), model_id="tiny", policy="vanilla", max_tokens=3)
    >>> req = parse_request(b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}', "tiny")
    >>> answer = engine.submit(req).result(timeout=60); answer.completion_tokens <= 3
    True
    >>> engine.close()
    """

    def __init__(self, model, *, model_id: str, policy: str = "rhea", policy_kwargs: dict | None = None,
                 max_tokens: int = 128, max_queue: int = 64, max_batch: int = 8, cache_entries: int = 4096,
                 cache_dir: str | None = None, prefix_blocks: int = 8, history_entries: int = 8,
                 batch_wait_ms: float = 50.0, start: bool = True, cache_bytes: int | None = DEFAULT_CACHE_BYTES,
                 cache_dir_bytes: int | None = None, limits: RequestLimits | None = None):
        from rhea.session import ChatSession

        for name, value, lo in (("max_tokens", max_tokens, 1), ("max_queue", max_queue, 1),
                                ("max_batch", max_batch, 1), ("cache_entries", cache_entries, 0),
                                ("prefix_blocks", prefix_blocks, 0), ("history_entries", history_entries, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ServeConfigError(f"{name}={value!r} must be an int >= {lo}")
        if isinstance(batch_wait_ms, bool) or not isinstance(batch_wait_ms, (int, float)) or not 0 <= batch_wait_ms <= 10_000:
            raise ServeConfigError(f"batch_wait_ms={batch_wait_ms!r} must be a number of milliseconds in [0, 10000]")
        self.batch_wait = batch_wait_ms / 1000.0
        self.limits = limits if limits is not None else RequestLimits()
        if not isinstance(self.limits, RequestLimits):
            raise ServeConfigError(f"limits={limits!r} must be a RequestLimits")
        self._running: list[Job] = []  # the jobs the worker holds now (cancelled on close)
        self.cancelled = self.trimmed = self.requeued = 0
        self.model, self.model_id = model, model_id
        self.max_tokens, self.max_queue, self.max_batch = max_tokens, max_queue, max_batch
        self.session = ChatSession(model, policy=policy, max_new_tokens=max_tokens, policy_kwargs=policy_kwargs,
                                   reuse_prefix_cache=False)
        self.policy_name = self.session.policy.name
        self.digest = adapter_digest(model)
        self.latents = LatentStore(model_id, self.digest, cache_entries, directory=cache_dir, max_bytes=cache_bytes,
                                   dir_max_bytes=cache_dir_bytes)
        self.prefixes = PrefixPool(prefix_blocks)
        self.histories = HistoryPool(history_entries)
        self.recognizer_cache: CachedRecognizer | None = None
        self.embedder_cache: CachedEmbedder | None = None
        self.compress: CachedCompress | None = None
        self._wrap_policy(self.session.policy, cache_entries)
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()
        self._paused = False
        self._closed = False
        self._job_seconds = 1.0  # running mean of one job's seconds, for Retry-After
        self.served = self.batches = self.batched_rows = 0
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # ------------------------------------------------------------ caches
    def _wrap_policy(self, policy, entries: int) -> None:
        recognizer = getattr(policy, "recognizer", None)
        if recognizer is not None:
            self.recognizer_cache = policy.recognizer = CachedRecognizer(recognizer, entries)
        if "dense" in getattr(policy, "components", ()):
            self.embedder_cache = policy._embedder = CachedEmbedder(policy.embedder, entries)
        if hasattr(policy, "episodic"):
            self.compresses_replies = bool(getattr(policy, "needs_latents", True))
            # cached in the dtype the policy's memory stores (`latent_dtype`: the model's by default)
            dtype = getattr(policy, "_store_dtype", None) or torch.float32
            self.compress = CachedCompress(self.model.compress_replies, self.latents, self.model.device, dtype)
            policy.episodic.compress_fn = self.compress

    def cache_stats(self) -> dict:
        out = {"latents": self.latents.stats(), "prefix_kv": self.prefixes.stats(),
               "history_kv": self.histories.stats(), "adapter_digest": self.digest}
        if self.compress is not None:
            out["latents"]["computed"] = self.compress.computed
        if self.recognizer_cache is not None:
            out["recognizer"] = self.recognizer_cache.verdicts.stats()
        if self.embedder_cache is not None:
            out["embeddings"] = self.embedder_cache.vectors.stats()
        return out

    # ------------------------------------------------------------ queue
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rhea-serve-worker", daemon=True)
            self._thread.start()

    def pause(self) -> None:
        """Hold the worker before its next job (jobs queue up); `resume` lets it go on."""
        with self._cv:
            self._paused = True

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """Stop: waiting jobs fail with 503 ``shutting_down``, the running ones are cancelled (generation
        stops at its next token), and the worker is given `timeout` seconds to finish."""
        with self._cv:
            self._closed = True
            waiting, self._jobs = list(self._jobs), deque()
            running = list(self._running)
            for job in running:
                job.cancelled.set()
            self._cv.notify_all()
        for job in running:  # answered now, not when the worker next looks (a long prefill cannot be stopped)
            _resolve(job.future, error=self._stopped("while it ran"))
        for job in waiting:
            job.cancelled.set()
            if not job.future.done():
                _resolve(job.future, error=APIError("the server is shutting down", status=503, type="server_error",
                                                  code="shutting_down"))
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _stopped(self, when: str) -> RheaError:
        """The error of a job the worker found cancelled `when` (e.g. "while the reply was generated"): 503
        ``shutting_down`` when the server is stopping, else `RequestCancelled` (its client went away)."""
        if self._closed:
            return APIError(f"the server is shutting down; the request was cancelled {when}", status=503,
                            type="server_error", code="shutting_down")
        return RequestCancelled(f"the client disconnected {when}")

    def cancel(self, future: concurrent.futures.Future) -> bool:
        """Cancel the job behind `future` (its client disconnected): a waiting job leaves the queue, a running
        one stops before its next step or token. Returns whether a job was found unfinished."""
        with self._cv:
            job = next((j for j in list(self._jobs) + self._running if j.future is future), None)
            if job is None or job.future.done():
                return False
            job.cancelled.set()
            if job in self._jobs:
                self._jobs.remove(job)
                _resolve(job.future, error=RequestCancelled("the client disconnected before the request was answered"))
            self.cancelled += 1
        return True

    @property
    def waiting(self) -> int:
        return len(self._jobs)

    def retry_after(self) -> int:
        return max(1, math.ceil(self._job_seconds * max(1, len(self._jobs)) / self.max_batch))

    def submit(self, request: ChatRequest, on_event: Callable[[str, Any], None] | None = None) -> concurrent.futures.Future:
        """Queue `request`; its future resolves to an `Answer` (or raises). Raises `QueueFullError`
        at once when ``max_queue`` jobs are already waiting."""
        n_messages = len(request.system) + 2 * len(request.conversation) + 1
        if n_messages > self.limits.max_messages:
            raise APIError(f"the request has {n_messages} messages; this server takes at most "
                           f"{self.limits.max_messages} (rhea serve --max-messages). Send fewer past turns: the "
                           "policy keeps what fits the window anyway", param="messages", code="too_many_messages")
        self.check_compressible(request)
        job = Job(request, on_event=on_event)
        with self._cv:
            if self._closed:
                raise APIError("the server is shutting down", status=503, type="server_error", code="shutting_down")
            if len(self._jobs) >= self.max_queue:
                raise QueueFullError(self.max_queue, self.retry_after())
            self._jobs.append(job)
            self._cv.notify()
        return job.future

    def check_compressible(self, request: ChatRequest) -> None:
        """Refuse, before any model work, a past reply the compressor cannot take whole: one over the
        model's context (less the `<mem>` slots) when replies are not compressed in chunks."""
        model = self.model
        limit = getattr(model, "max_context", None)
        if (self.compress is None or not getattr(self, "compresses_replies", True) or limit is None
                or getattr(model.config, "compress_chunk_tokens", None)):
            return
        room = limit - model.n_mem
        for k, turn in enumerate(request.conversation):
            text = turn.assistant
            if len(text.encode("utf-8")) + 1 <= room:  # at most one token per byte, and one more at the start
                continue
            n = len(model.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
            if n > room:
                raise ContextOverflowError(
                    f"past assistant reply {k + 1} of the messages has {n} tokens; this model compresses a reply of at "
                    f"most {room} tokens ({limit} of context less {model.n_mem} <mem> slots). Shorten or split that "
                    "reply, or drop it from the messages")

    def _take(self) -> list[Job] | None:
        with self._cv:
            while not self._closed and (self._paused or not self._jobs):
                self._cv.wait()
            if self._closed:
                return None
            first = self._fairest()
            self._jobs.remove(first)
            batch = [first]
            if first.on_event is None and self.max_batch > 1:
                key = first.request.generation_key(self.max_tokens)

                def fellows() -> int:
                    return sum(j.on_event is None and j.request.generation_key(self.max_tokens) == key
                               for j in self._jobs)

                # a short window for the rest of a burst (clients answered together send together)
                deadline = time.monotonic() + self.batch_wait
                while not self._closed and fellows() < self.max_batch - 1 and (left := deadline - time.monotonic()) > 0:
                    self._cv.wait(left)
                for job in list(self._jobs):
                    if len(batch) >= self.max_batch:
                        break
                    if job.on_event is None and job.request.generation_key(self.max_tokens) == key:
                        self._jobs.remove(job)
                        batch.append(job)
            self._running = batch
            return batch

    #: a job that has waited this long goes first whatever its size (no request starves)
    FAIR_WAIT_S = 5.0

    def _fairest(self) -> Job:
        """The next job: the oldest that has waited `FAIR_WAIT_S`, else the smallest (fewest message
        characters), so a huge request queued ahead does not hold up small ones for its whole run."""
        now = time.perf_counter()
        first = self._jobs[0]
        if now - first.enqueued >= self.FAIR_WAIT_S:
            return first
        return min(self._jobs, key=lambda j: (j.request.size, j.enqueued))

    #: seconds of a job's cacheable preparation between two looks for smaller waiting jobs
    PREPARE_SLICE_S = 0.5
    #: a job yields to smaller ones only while this many pieces of its preparation are left: an ordinary
    #: request (a few new replies and messages) is never sent back, only a huge one is
    YIELD_MIN_PENDING = 16

    def _prepare(self, job: Job) -> bool:
        """Do `job`'s cacheable work (compress its past replies not cached as latents, read its user
        messages with the recognizer) into the engine's caches, a slice of `PREPARE_SLICE_S` at a time.
        Between slices, while `YIELD_MIN_PENDING` pieces are left, a smaller job waiting sends this one back
        to the queue, so a huge request's preparation is interleaved with small requests instead of holding them up.
        Returns whether the job is ready to plan (False: requeued, or failed with its error set)."""
        try:
            if job.cancelled.is_set():
                raise self._stopped("before the request was answered")
            if job.bounded is None:
                self.session.check_fits(job.request.query, job.request.max_tokens or self.max_tokens)
                job.bounded = self._bounded(job.request)
                job.pending = deque(self._cacheable_work(job.bounded))
            while job.pending:
                t0 = time.perf_counter()
                while job.pending and time.perf_counter() - t0 < self.PREPARE_SLICE_S:
                    job.pending.popleft()()
                if job.cancelled.is_set():
                    raise self._stopped("while the request was prepared")
                if len(job.pending) >= self.YIELD_MIN_PENDING and self._requeue_if_smaller_waiting(job):
                    return False
        except RheaError as e:
            _resolve(job.future, error=e)
            return False
        return True

    def _cacheable_work(self, request: ChatRequest) -> list[Callable[[], Any]]:
        """What `rebuild` would compute for `request` that the caches keep: one call per past reply not yet
        cached as latents, per user message whose recognizer verdict is not cached, and per text the dense
        scorer embeds that has no cached vector."""
        work: list[Callable[[], Any]] = []
        policy = self.session.policy
        turns = list(request.conversation)
        if self.recognizer_cache is not None and getattr(policy, "use_im", False):
            for i, text in enumerate([t.user for t in turns] + [request.query]):
                if self.recognizer_cache.verdicts.get((i == 0, text)) is None:
                    work.append(lambda text=text, i=i: self.recognizer_cache(text, i))
        if self.embedder_cache is not None:  # the dense scorer embeds the query and every past turn
            from rhea.context.conversation import turn_text

            for text in dict.fromkeys([request.query] + [turn_text(t) for t in turns]):
                if self.embedder_cache.vectors.get(text) is None:
                    work.append(lambda text=text: self.embedder_cache.encode([text]))
        every = getattr(policy, "compresses_every_reply", getattr(policy, "needs_latents", False))
        keeps = self.latents.directory is not None or self.latents.memory.max_entries > 0
        if self.compress is not None and every and keeps:  # a lazy policy compresses what its plan shows
            seen: set[str] = set()
            for turn in turns:
                if turn.assistant not in seen and self.latents.get(turn.assistant) is None:
                    seen.add(turn.assistant)
                    work.append(lambda text=turn.assistant: self.compress([text]))
        return work

    def _requeue_if_smaller_waiting(self, job: Job) -> bool:
        """Put `job` back at the end of the queue when a smaller job waits, in the queue or in `job`'s own
        batch (fellows taken with it, not answered yet: they go on without it); returns whether it did. Its
        wait starts anew, so it has its next slice after the smaller ones, or `FAIR_WAIT_S` at the latest."""
        with self._cv:
            fellows = [j for j in self._running if j is not job and not j.future.done()]
            if self._closed or not any(j.request.size < job.request.size for j in [*self._jobs, *fellows]):
                return False
            job.enqueued = time.perf_counter()
            self._jobs.append(job)
            if job in self._running:
                self._running.remove(job)
            self.requeued += 1
            self._cv.notify()
        return True

    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while (taken := self._take()) is not None:
            t0 = time.perf_counter()
            batch: list[Job] = []  # the jobs ready to plan (a job sent back to the queue is not among them)
            try:
                for job in list(taken):  # a job sent back leaves `self._running`, which `taken` is
                    batch.append(job)
                    if not self._prepare(job):
                        batch.pop()
                if len(batch) == 1:
                    self._one(batch[0])
                elif batch:
                    self._batch(batch)
            except BaseException as e:  # never let the worker die: fail the jobs instead
                log.exception("worker failed on a batch of %d", len(batch))
                for job in batch:
                    if not job.future.done():
                        _resolve(job.future, error=e)
            with self._cv:
                self._running = []
            if batch:
                dt = (time.perf_counter() - t0) / len(batch)
                self._job_seconds = 0.8 * self._job_seconds + 0.2 * dt

    # ------------------------------------------------------------ one request
    def rebuild(self, request: ChatRequest, bounded: ChatRequest | None = None):
        """Plan `request` on the engine's session: reset, replay the past turns, plan the query.

        A query that alone cannot fit the model's window with the request's ``max_tokens`` is a
        `ContextWindowError` (400 ``context_length_exceeded``) before any past turn is replayed; the plan
        itself fits the window by construction (`ChatSession.begin_turn`). `bounded`: the request already
        within the limits (`_bounded`, as `_prepare` fixed it), so the turns kept do not change with what
        the caches gained meanwhile."""
        session, policy = self.session, self.session.policy
        max_new = request.max_tokens or self.max_tokens
        if bounded is None:
            session.check_fits(request.query, max_new)
            bounded = self._bounded(request)
        request = bounded
        policy.reset()
        if hasattr(policy, "episodic") and self.compress is not None:
            policy.episodic.compress_fn = self.compress  # reset() made a new episodic memory
        im = getattr(policy, "im", None)
        if hasattr(policy, "use_im"):
            if request.system:
                if not policy.use_im or im is None:
                    raise APIError(f"policy {policy.name!r} has no instruction block, so the system message would be "
                                   "lost; send it as a user message, or serve a policy with one (e.g. 'rhea')",
                                   param="messages", code="system_not_supported")
                for text in request.system:
                    im.add(text, 0, source_message=text)
        else:
            policy.system_prompt = "\n\n".join(request.system) or None
        policy.catch_up(request.conversation)  # as ChatSession.set_policy catches a policy up
        session.conversation = request.conversation
        staged = session.begin_turn(request.query, max_new_tokens=max_new)
        if request.trimmed:
            staged.plan.decisions.records.append({"event": "bounded_work", "dropped_oldest_turns": request.trimmed,
                                                  "reason": f"max_compressions={self.limits.max_compressions}: "
                                                            "older replies not cached as latents were dropped"})
        return staged

    def _bounded(self, request: ChatRequest) -> ChatRequest:
        """`request` within the limits: its history tokens at most ``max_history_tokens`` (else a 400), and
        at most ``max_compressions`` past replies not yet cached as latents (the oldest turns beyond that
        are dropped, counted in ``request.trimmed``)."""
        import dataclasses

        from rhea.context.budget import count_text_tokens

        tok = self.model.tokenizer
        total = sum(count_text_tokens(t, tok) for t in request.system) + count_text_tokens(request.query, tok)
        for turn in request.conversation:
            total += count_text_tokens(turn.user, tok) + count_text_tokens(turn.assistant, tok)
            if total > self.limits.max_history_tokens:
                raise APIError(f"the messages hold over {self.limits.max_history_tokens} tokens, more than this server "
                               "takes in one request (rhea serve --max-history-tokens); send fewer past turns",
                               param="messages", code="context_length_exceeded")
        policy = self.session.policy
        # a policy that compresses only the replies its plan shows as latents does bounded work whatever the history
        every = getattr(policy, "compresses_every_reply", getattr(policy, "needs_latents", False))
        if self.compress is None or not every:
            return request
        turns, new, keep_from = request.conversation.turns, 0, 0
        for i in range(len(turns) - 1, -1, -1):
            if self.latents.get(turns[i].assistant) is None:
                new += 1
                if new > self.limits.max_compressions:
                    keep_from = i + 1
                    break
        if keep_from == 0:
            return request
        self.trimmed += 1
        log.info("request over max_compressions=%d: dropped its %d oldest turns", self.limits.max_compressions,
                 keep_from)
        return dataclasses.replace(request, conversation=Conversation(list(turns[keep_from:])), trimmed=keep_from)

    def _gen_kwargs(self, request: ChatRequest) -> dict:
        if request.temperature > 0:
            return {"do_sample": True, "temperature": request.temperature, "top_p": request.top_p}
        return {}

    def _check_fits(self, plan: ContextPlan, max_new: int) -> int:
        n_prompt = int(render(plan, self.model.tokenizer).input_ids.shape[1])
        limit = self.model.max_context
        if limit is not None and n_prompt + max_new > limit:
            raise ContextOverflowError(
                f"this model's maximum context length is {limit} tokens; the planned prompt is {n_prompt} tokens "
                f"and max_tokens={max_new} (policy {plan.policy!r} kept "
                f"{sum(d.tier != 'drop' for d in plan.decisions.turns)} of {len(plan.decisions.turns)} past turns). "
                "Shorten the messages or lower max_tokens")
        return n_prompt

    def _answer(self, job: Job, staged, text: str, new_tokens: int, prompt_tokens: int, timings: dict,
                filt: StopFilter | None = None) -> Answer:
        max_new = job.request.max_tokens or self.max_tokens
        if filt is None:
            filt = StopFilter(job.request.stop)
            filt.feed(text)
        final = filt.final()
        reason = "stop" if filt.stopped or new_tokens < max_new else "length"
        return Answer(final, reason, prompt_tokens, new_tokens, staged.plan, job.request.conversation,
                      {"plan_s": staged.t_plan, **timings})

    def _history_caches(self, plans) -> list:
        """A history cache per plan from the pool (None each when the pool is off)."""
        if self.histories.max_entries == 0:
            return [None] * len(plans)
        from rhea.context import render

        return self.histories.for_prompts([render(p, self.model.tokenizer).input_ids[0].tolist() for p in plans])

    def _one(self, job: Job) -> None:
        from rhea.session.generation import generate_from_plan

        request = job.request
        try:
            if job.cancelled.is_set():
                raise self._stopped("before the request was answered")
            staged = self.rebuild(request, job.bounded)
            if job.cancelled.is_set():
                raise self._stopped("while the request was planned")
            max_new = request.max_tokens or self.max_tokens
            if staged.answered is None:
                self._check_fits(staged.plan, max_new)
        except RheaError as e:
            _resolve(job.future, error=e)
            return
        filt = StopFilter(request.stop)
        if job.on_event is not None:
            job.on_event("start", None)

        def on_text(piece: str) -> None:
            out = filt.feed(piece)
            if out and job.on_event is not None:
                job.on_event("text", out)

        if staged.answered is not None:
            on_text(staged.answered)
            n_new = len(self.model.tokenizer(staged.answered, add_special_tokens=False)["input_ids"])
            answer = self._answer(job, staged, staged.answered, n_new, staged.plan.ledger.text_tokens, {}, filt)
        else:
            if request.seed is not None:
                torch.manual_seed(request.seed)
            cache = self._history_caches([staged.plan])[0]
            if cache is None:  # (an empty HistoryKVCache is falsy: test for None)
                cache = self.prefixes.for_block(staged.plan.system_text)
            from transformers import StoppingCriteriaList

            gen = generate_from_plan(self.model, staged.plan, max_new_tokens=max_new,
                                     adapter=self.session._adapter_for(staged.plan), on_text=on_text,
                                     prefix_cache=cache, stopping_criteria=StoppingCriteriaList([_StopWhenCancelled(job)]),
                                     **self._gen_kwargs(request))
            if job.cancelled.is_set():
                _resolve(job.future, error=self._stopped("while the reply was generated"))
                return
            answer = self._answer(job, staged, gen.text, gen.new_tokens, gen.prompt_tokens,
                                  {**gen.timings, "batch_rows": 1.0}, filt)
        if job.on_event is not None:
            rest = filt.finish()
            if rest:
                job.on_event("text", rest)
        self.served += 1
        _resolve(job.future, answer)

    def _batch(self, jobs: list[Job]) -> None:
        from rhea.session.batch import generate_batch

        request0 = jobs[0].request
        max_new = request0.max_tokens or self.max_tokens
        groups: dict[str, list] = {}
        for job in jobs:
            try:
                if job.cancelled.is_set():
                    raise self._stopped("before the request was answered")
                staged = self.rebuild(job.request, job.bounded)
                if staged.answered is not None:
                    n_new = len(self.model.tokenizer(staged.answered, add_special_tokens=False)["input_ids"])
                    _resolve(job.future, self._answer(job, staged, staged.answered, n_new,
                                                       staged.plan.ledger.text_tokens, {}))
                    continue
                self._check_fits(staged.plan, max_new)
            except RheaError as e:
                _resolve(job.future, error=e)
                continue
            # the plan is self-contained (messages + latents); the conversation is the request's own
            groups.setdefault(self.session._adapter_for(staged.plan), []).append((job, staged))
        for adapter, rows in groups.items():
            if request0.seed is not None:
                torch.manual_seed(request0.seed)
            plans = [staged.plan for _, staged in rows]
            gens = generate_batch(self.model, plans, max_new_tokens=max_new, adapter=adapter,
                                  caches=self._history_caches(plans), **self._gen_kwargs(request0))
            self.batches += 1
            self.batched_rows += len(rows)
            for (job, staged), gen in zip(rows, gens):
                answer = self._answer(job, staged, gen.text, gen.new_tokens, gen.prompt_tokens, dict(gen.timings))
                self.served += 1
                _resolve(job.future, answer)


__all__ = ["Answer", "Engine", "RequestCancelled", "RequestLimits", "StopFilter", "rhea_usage"]
