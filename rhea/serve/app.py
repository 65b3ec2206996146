"""The HTTP face of `rhea serve`: an OpenAI-compatible FastAPI app around an `Engine`.

Routes: ``POST /v1/chat/completions`` (JSON, or server-sent events with ``stream: true``),
``GET /v1/models``, ``GET /health``, ``GET /`` (the chat page, ``static/index.html``) and
``GET /static/...``. Every error is OpenAI's body ``{"error": {"message", "type", "param",
"code"}}`` with its status; an unexpected exception is logged here and answered with a generic
500, never a traceback.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path

from fastapi import Request

from rhea.context import ContextOverflowError
from rhea.errors import RheaError
from rhea.serve.engine import Answer, Engine, rhea_usage
from rhea.serve.errors import APIError, QueueFullError
from rhea.serve.protocol import ChatRequest, parse_request

log = logging.getLogger("rhea.serve")
STATIC = Path(__file__).resolve().parent / "static"


def error_body(exc: BaseException) -> tuple[int, dict, dict]:
    """``(status, body, headers)`` for any exception raised while answering."""
    if isinstance(exc, APIError):
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, QueueFullError) else {}
        return exc.status, exc.body(), headers
    if isinstance(exc, ContextOverflowError):
        return 400, APIError(str(exc), param="messages", code="context_length_exceeded").body(), {}
    if isinstance(exc, RheaError):
        return 400, APIError(str(exc), code=type(exc).__name__).body(), {}
    log.error("unexpected error while answering a request", exc_info=exc)
    return 500, APIError("The server had an error while processing your request; it is logged on the server.",
                         status=500, type="server_error", code="internal_error").body(), {}


def _usage(answer: Answer) -> dict:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens}


def completion_body(engine: Engine, request: ChatRequest, answer: Answer, cid: str, created: int) -> dict:
    body = {"id": cid, "object": "chat.completion", "created": created, "model": engine.model_id,
            "system_fingerprint": f"rhea-{engine.digest}",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text, "refusal": None},
                         "logprobs": None, "finish_reason": answer.finish_reason}],
            "usage": _usage(answer)}
    if request.rhea:
        body["rhea"] = rhea_usage(answer, engine.policy_name, trace=request.trace)
    return body


def create_app(engine: Engine, access: "AccessPolicy | None" = None):
    """The FastAPI app serving `engine` (the engine's worker must be started), behind `access` (API key,
    JSON-only POSTs, Host check, CORS; `rhea.serve.access`): by default JSON-only POSTs and nothing else."""
    from rhea.serve.access import AccessMiddleware, AccessPolicy

    from fastapi import FastAPI
    from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = FastAPI(title="rhea serve", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.add_middleware(AccessMiddleware, policy=access if access is not None else AccessPolicy())

    def error_response(exc: BaseException) -> JSONResponse:
        status, body, headers = error_body(exc)
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # unknown route, wrong method
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        body = APIError(f"{request.method} {request.url.path}: {exc.detail}", code=code).body()
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": engine.model_id, "policy": engine.policy_name,
                "queue": {"waiting": engine.waiting, "max_queue": engine.max_queue, "max_batch": engine.max_batch},
                "served": engine.served, "batches": engine.batches, "batched_rows": engine.batched_rows,
                "requeued": engine.requeued,
                "cache": engine.cache_stats()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": engine.model_id, "object": "model", "created": 0,
                                            "owned_by": "rhea", "rhea": {"policy": engine.policy_name}}]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != engine.model_id:
            from rhea.serve.errors import ModelNotFoundError

            return error_response(ModelNotFoundError(model_id, engine.model_id))
        return {"id": engine.model_id, "object": "model", "created": 0, "owned_by": "rhea"}

    def static_file(relative: str):
        root = STATIC.resolve()
        try:
            path = (root / relative).resolve() if "\x00" not in relative else None
            found = path is not None and path.is_relative_to(root) and path.is_file()
        except (OSError, ValueError):  # a name no file system holds (over-long, undecodable)
            found = False
        if not found:
            what = "the chat page (rhea/serve/static/index.html) is not installed" if relative == "index.html" \
                else f"no static file {relative!r}"
            return JSONResponse(APIError(what, code="not_found").body(), status_code=404)
        return FileResponse(path)

    @app.get("/")
    async def index():
        return static_file("index.html")

    @app.get("/static/{relative:path}")
    async def static(relative: str):
        return static_file(relative)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request):
        try:
            request = parse_request(await _limited_body(http, engine.limits.max_body_bytes), engine.model_id)
        except Exception as e:  # noqa: BLE001 - every error becomes an OpenAI body
            return error_response(e)
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        loop = asyncio.get_running_loop()
        if not request.stream:
            try:
                future = engine.submit(request)
                answer = await _unless_disconnected(http, engine, future)
            except Exception as e:  # noqa: BLE001
                return error_response(e)
            return JSONResponse(completion_body(engine, request, answer, cid, created))

        events: asyncio.Queue = asyncio.Queue()

        def on_event(kind: str, payload) -> None:  # called on the worker thread
            loop.call_soon_threadsafe(events.put_nowait, (kind, payload))

        try:
            future = engine.submit(request, on_event)
        except Exception as e:  # noqa: BLE001
            return error_response(e)
        future.add_done_callback(lambda f: loop.call_soon_threadsafe(events.put_nowait, ("done", f)))
        kind, payload = await events.get()
        if kind == "done":  # failed before generation began (bad plan, over-long input): a plain error
            exc = payload.exception()
            return error_response(exc) if exc is not None else error_response(RuntimeError("stream ended early"))
        return StreamingResponse(_sse(engine, request, events, cid, created, future), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app


# ---------------------------------------------------------------- bounded work per request
async def _limited_body(http: Request, limit: int) -> bytes:
    """The request body, read up to `limit` bytes: a longer one (by its Content-Length, or as it
    arrives) is a 413 before it is held in memory whole."""
    def too_large(size: str) -> APIError:
        return APIError(f"the request body is {size} bytes; this server takes at most {limit} "
                        "(rhea serve --max-body-bytes)", status=413, param=None, code="request_too_large")

    declared = http.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(declared)
    chunks, size = [], 0
    async for chunk in http.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"over {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


async def _unless_disconnected(http: Request, engine: Engine, future, poll_s: float = 0.25):
    """The future's answer; if the client disconnects first, the job is cancelled (the worker skips it,
    or stops before its next step or token) and `RequestCancelled` is raised."""
    from rhea.serve.engine import RequestCancelled

    waiting = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=poll_s)
        if done:
            return waiting.result()
        if await http.is_disconnected():
            engine.cancel(future)
            raise RequestCancelled("the client disconnected before the request was answered")


async def _sse(engine: Engine, request: ChatRequest, events: asyncio.Queue, cid: str, created: int, future=None):
    """The stream's chunks: the role, the text pieces, the finish chunk (with ``rhea`` when asked),
    the usage chunk (with ``stream_options.include_usage``), then ``[DONE]``. A client that goes away
    mid-stream cancels its job (generation stops at the next token)."""
    try:
        async for piece in _sse_chunks(engine, request, events, cid, created):
            yield piece
    finally:
        if future is not None and not future.done():
            engine.cancel(future)


async def _sse_chunks(engine: Engine, request: ChatRequest, events: asyncio.Queue, cid: str, created: int):
    base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": engine.model_id,
            "system_fingerprint": f"rhea-{engine.digest}"}

    def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        body = {**base, "choices": choices, **extra}
        if request.include_usage and "usage" not in body:
            body["usage"] = None
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    while True:
        kind, payload = await events.get()
        if kind == "text":
            yield chunk({"content": payload})
        elif kind == "done":
            exc = payload.exception()
            if exc is not None:
                _, body, _ = error_body(exc)
                yield f"data: {json.dumps(body)}\n\n"
            else:
                answer: Answer = payload.result()
                extra = {"rhea": rhea_usage(answer, engine.policy_name, trace=request.trace)} if request.rhea else {}
                yield chunk({}, answer.finish_reason, **extra)
                if request.include_usage:
                    yield chunk(None, usage=_usage(answer))
            break
    yield "data: [DONE]\n\n"


__all__ = ["create_app", "error_body"]
