"""`rhea serve`: check the arguments, load the model, run the OpenAI-compatible server (uvicorn)."""
from __future__ import annotations

import os
from pathlib import Path

from rhea.serve.errors import ServeConfigError


def served_name(model: str) -> str:
    """The id clients send as ``model``: a zoo name as is, a directory by its folder name.

    >>> import tempfile, os
    >>> folder = os.path.join(tempfile.mkdtemp(), "my-rhea")
    >>> os.mkdir(folder); served_name("smollm2-135m"), served_name(folder + "/")
    ('smollm2-135m', 'my-rhea')
    """
    return Path(model).resolve().name if os.path.isdir(model) else model


def check_args(args) -> dict:
    """Every check that needs no model, so a typo fails in a second; returns the policy kwargs."""
    from rhea.modeling.loading import MAX_COUNT
    from rhea.modeling.zoo import check_model_path
    from rhea.policies import policy_class

    if not 1 <= args.port <= 65535:
        raise ServeConfigError(f"--port {args.port} must be between 1 and 65535 (0 is not allowed: clients need "
                               "to know the port)")
    if args.served_model_name is not None and not args.served_model_name.strip():
        raise ServeConfigError("--served-model-name is empty; pass the id clients send (or leave it out: the zoo name "
                               "or folder name)")
    if not args.host:
        raise ServeConfigError("--host must be an address to listen on, e.g. 127.0.0.1 or 0.0.0.0")
    for name in ("max_queue", "max_batch", "max_tokens"):
        if getattr(args, name) < 1:
            raise ServeConfigError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    if not 0 <= args.batch_wait_ms <= 10_000:
        raise ServeConfigError(f"--batch-wait-ms {args.batch_wait_ms} must be between 0 and 10000")
    if args.cache_entries < 0:
        raise ServeConfigError(f"--cache-entries {args.cache_entries} must be >= 0 (0: no in-memory cache)")
    if args.cache_bytes < 0 or (args.cache_dir_bytes is not None and args.cache_dir_bytes < 0):
        raise ServeConfigError("--cache-bytes and --cache-dir-bytes must be >= 0")
    if args.history_entries < 0:
        raise ServeConfigError(f"--history-entries {args.history_entries} must be >= 0 (0: no conversation KV reuse)")
    access_policy(args)  # the access options' own errors, before the model loads
    # ---- bounded work per request
    for name in ("max_messages", "max_body_bytes", "max_history_tokens", "max_compressions"):
        if getattr(args, name) < 1:
            raise ServeConfigError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    if not 0 <= args.shutdown_timeout <= 86_400:  # also refuses nan
        raise ServeConfigError(f"--shutdown-timeout {args.shutdown_timeout} must be >= 0 seconds (and at most 86400)")
    for name, most in (("max_queue", MAX_COUNT), ("max_batch", MAX_COUNT), ("max_tokens", MAX_COUNT),
                       ("cache_entries", MAX_COUNT), ("history_entries", MAX_COUNT), ("max_messages", MAX_COUNT),
                       ("max_history_tokens", MAX_COUNT), ("max_compressions", MAX_COUNT),
                       ("max_body_bytes", 2 ** 40), ("cache_bytes", 2 ** 60), ("cache_dir_bytes", 2 ** 60)):
        value = getattr(args, name)
        if value is not None and value > most:
            raise ServeConfigError(f"--{name.replace('_', '-')} {str(value)[:20]}{'...' if len(str(value)) > 20 else ''}"
                                   f" is too large; pass at most {most:,}")
    # ----
    check_model_path(args.model)
    cls = policy_class(args.policy)  # raises the registry's named error for an unknown policy
    kwargs = {k: v for k, v in (("tau_low", args.tau_low), ("tau_high", args.tau_high), ("scorer", args.scorer),
                                ("latent_tier", args.latent_tier)) if v is not None}
    if kwargs and cls.model_arg is None:
        raise ServeConfigError(f"--tau-low/--tau-high/--scorer/--latent-tier set the rhea policies; policy "
                               f"{args.policy!r} takes none of them")
    if args.cache_dir is not None and Path(args.cache_dir).exists() and not Path(args.cache_dir).is_dir():
        raise ServeConfigError(f"--cache-dir {args.cache_dir} is a file; pass a directory")
    if args.cache_dir is not None:
        from rhea.storage import StorageError, check_writable_directory

        try:  # under a file, read-only, no permission: said before the model loads
            check_writable_directory(args.cache_dir, "--cache-dir")
        except StorageError as e:
            raise ServeConfigError(f"{e} (shared by the replicas)") from None
    return kwargs


def access_policy(args):
    """The `AccessPolicy` of the access options (--api-key or RHEA_API_KEY, --allowed-hosts, --cors-origins)."""
    from rhea.serve.access import AccessPolicy

    return AccessPolicy.for_server(args.host, api_key=args.api_key, allowed_hosts=args.allowed_hosts,
                                   cors_origins=args.cors_origins)


def warm_up(engine) -> float:
    """Answer one tiny request before listening, so the first client does not pay for loading the
    recognizer's and the scorer's models (MiniLM, a few seconds) or the first prefill. Returns seconds."""
    import time

    from rhea.context import Conversation
    from rhea.serve.protocol import ChatRequest

    t0 = time.perf_counter()
    engine.submit(ChatRequest(model=engine.model_id, system=[], conversation=Conversation(), query="Hello.",
                              max_tokens=1)).result()
    return time.perf_counter() - t0


def _cmd_serve(args) -> int:
    import logging

    import uvicorn

    from rhea.modeling.loading import load_rhea_model
    from rhea.serve.app import create_app
    from rhea.serve.engine import Engine, RequestLimits

    policy_kwargs = check_args(args)
    limits = RequestLimits(max_messages=args.max_messages, max_body_bytes=args.max_body_bytes,
                           max_history_tokens=args.max_history_tokens, max_compressions=args.max_compressions)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    model = load_rhea_model(args.model, device=args.device)
    engine = Engine(model, model_id=args.served_model_name or served_name(args.model), policy=args.policy,
                    policy_kwargs=policy_kwargs, max_tokens=args.max_tokens, max_queue=args.max_queue,
                    max_batch=args.max_batch, cache_entries=args.cache_entries, cache_dir=args.cache_dir,
                    history_entries=args.history_entries, batch_wait_ms=args.batch_wait_ms,
                    cache_bytes=args.cache_bytes, cache_dir_bytes=args.cache_dir_bytes,
                    limits=limits)
    warm_up(engine)
    print(f"rhea serve: model {engine.model_id!r}, policy {engine.policy_name!r} on http://{args.host}:{args.port}",
          flush=True)
    # SIGTERM / Ctrl-C: open requests get --shutdown-timeout seconds to finish, then the engine cancels them (each
    # answered 503 shutting_down); uvicorn gives the connections a little longer, to send those answers
    config = uvicorn.Config(create_app(engine, access_policy(args)), host=args.host, port=args.port,
                            log_level=args.log_level, timeout_graceful_shutdown=args.shutdown_timeout + SEND_GRACE_S)
    server = _server_class()(config, engine, args.shutdown_timeout)
    try:
        server.run()
    finally:
        # the worker stops at its next token or slice; a cache file it leaves half-written is a *.tmp sibling,
        # never a broken entry (removed at the next start). What is left of the exit budget bounds the wait.
        engine.close(timeout=server.time_left())
    return 0


#: seconds after --shutdown-timeout for the cancelled requests' 503 answers to be sent
SEND_GRACE_S = 1.5


def _server_class():
    """The `DrainingServer` class (defined on first use: uvicorn is imported only when a server runs)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server that, on the first SIGTERM / Ctrl-C, closes the engine `drain_s` seconds
        later: requests still running then are cancelled and answered 503 ``shutting_down``, waiting
        ones too, instead of their connections being dropped. uvicorn then re-raises the signal, so the
        process ends as killed by it (exit status -15 for SIGTERM), as process managers expect."""

        def __init__(self, config, engine, drain_s: float):
            super().__init__(config)
            self.engine, self.drain_s, self._timer = engine, drain_s, None
            self._signalled: float | None = None

        def time_left(self) -> float:
            """Seconds left of the exit budget (`drain_s` + `SEND_GRACE_S` from the first signal; the
            whole grace when no signal came), at least 0.1."""
            import time

            if self._signalled is None:
                return SEND_GRACE_S
            return max(0.1, self.drain_s + SEND_GRACE_S - (time.monotonic() - self._signalled))

        def handle_exit(self, sig, frame) -> None:
            import threading
            import time

            if self._signalled is None:
                self._signalled = time.monotonic()
            if self._timer is None:
                self._timer = threading.Timer(self.drain_s, self.engine.close, kwargs={"timeout": 0})
                self._timer.daemon = True
                self._timer.start()
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets=None) -> None:
            await super().shutdown(sockets)
            # before uvicorn re-raises the signal: the worker stops at its next token or slice, so no cache
            # write is cut short
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, lambda: self.engine.close(timeout=self.time_left()))

    return DrainingServer


def register(sub) -> None:
    from rhea.modeling.loading import cosine_threshold

    from rhea.constants import DEFAULT_POLICY
    from rhea.modeling.loading import add_device_argument, add_threads_argument

    p = sub.add_parser("serve", help="OpenAI-compatible chat server (POST /v1/chat/completions) over a policy")
    p.add_argument("--model", default="smollm2-135m", help="model-zoo name or Rhea/HF model directory")
    p.add_argument("--served-model-name", default=None, help="the id clients send (default: the zoo name or folder name)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help=f"context policy (default {DEFAULT_POLICY})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=128, help="reply length when a request sets no max_tokens")
    p.add_argument("--max-queue", type=int, default=64, help="requests waiting at most; more get 503 + Retry-After")
    p.add_argument("--max-batch", type=int, default=8, help="waiting requests generated together (1: one by one)")
    p.add_argument("--batch-wait-ms", type=float, default=50.0,
                   help="how long a request waits for others to batch with when too few are queued (default 50)")
    p.add_argument("--cache-entries", type=int, default=4096, help="in-memory entries per cache (LRU)")
    p.add_argument("--history-entries", type=int, default=8,
                   help="conversations whose keys/values are kept, so a request that continues one prefills only "
                        "its new tokens (each holds one conversation's KV: ~57 kB per token for a 1.5B model in "
                        "fp32); 0 turns it off")
    p.add_argument("--cache-dir", default=None, help="shared latent store: a directory of safetensors files that "
                   "replicas read and write")
    p.add_argument("--cache-bytes", type=int, default=1 << 30,
                   help="bytes of latents kept in memory (LRU; default 1 GiB). One latent is n_mem x latent width values "
                        "in the model's dtype (4 bytes in fp32, 2 in bf16): 1.66 MB for smollm2-135m's `states` "
                        "compressor in fp32 (docs/guides/serving.md)")
    p.add_argument("--cache-dir-bytes", type=int, default=None,
                   help="bytes of latent files kept in --cache-dir (least recently used removed first; default: "
                        "no bound)")
    p.add_argument("--tau-low", type=cosine_threshold, default=None)
    p.add_argument("--tau-high", type=cosine_threshold, default=None)
    p.add_argument("--scorer", choices=["latent", "bm25", "dense", "fused"], default=None)
    p.add_argument("--latent-tier", choices=["auto", "on", "off"], default=None)
    access = p.add_argument_group("access control (docs/serving.md, 'Access control')")
    access.add_argument("--api-key", default=None,
                        help="require 'Authorization: Bearer KEY' on /v1/* (401 otherwise); default: the RHEA_API_KEY "
                             "environment variable, else no key")
    access.add_argument("--allowed-hosts", default=None, metavar="HOSTS",
                        help="comma list of names the Host header may carry (421 otherwise), '*' for any; default: "
                             "localhost names when --host is a loopback address, any host otherwise")
    access.add_argument("--cors-origins", default=None, metavar="ORIGINS",
                        help="comma list of browser origins allowed to call the API (e.g. https://app.example.com), "
                             "'*' for any; default: none (CORS off)")
    # ---- bounded work per request (OpenAI-style 400 / 413 errors past each limit)
    from rhea.serve.engine import (DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_COMPRESSIONS, DEFAULT_MAX_HISTORY_TOKENS,
                                   DEFAULT_MAX_MESSAGES)

    p.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES,
                   help=f"messages one request may carry (default {DEFAULT_MAX_MESSAGES}); more: 400 too_many_messages")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help=f"request body size limit in bytes (default {DEFAULT_MAX_BODY_BYTES}); more: 413")
    p.add_argument("--max-history-tokens", type=int, default=DEFAULT_MAX_HISTORY_TOKENS,
                   help=f"tokens all of a request's messages may hold (default {DEFAULT_MAX_HISTORY_TOKENS}); more: "
                        "400 context_length_exceeded")
    p.add_argument("--max-compressions", type=int, default=DEFAULT_MAX_COMPRESSIONS,
                   help=f"past replies compressed anew per request (default {DEFAULT_MAX_COMPRESSIONS}; cached latents "
                        "are reused): older uncompressed turns are dropped, the reason recorded")
    p.add_argument("--shutdown-timeout", type=float, default=3.0,
                   help="seconds open requests get on SIGTERM to finish (default 3); then they are cancelled and "
                        "answered 503 shutting_down, and the process exits within about 1.5 s more")
    # ----
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_device_argument(p)
    add_threads_argument(p)
    p.set_defaults(func=_cmd_serve)
