"""Bounded work per request: message, body-size and history-token limits, at most N new compressions,
cancellation of a request whose client went away, shutdown, and small requests first."""
from __future__ import annotations

import json
import random
import time

import pytest

from rhea.testing import _WORDS, tiny_rhea

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from rhea.serve.app import create_app  # noqa: E402
from rhea.serve.engine import Engine, RequestCancelled, RequestLimits  # noqa: E402
from rhea.serve.errors import APIError, ServeConfigError  # noqa: E402
from rhea.serve.protocol import parse_request  # noqa: E402


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def history(turns: int, user: int = 5, reply: int = 5, seed: int = 0) -> list[dict]:
    out = []
    for i in range(turns):
        out += [{"role": "user", "content": words(user, seed + i)}, {"role": "assistant", "content": words(reply, seed + 500 + i)}]
    return out + [{"role": "user", "content": "what color is the cat ?"}]


def request(messages, **extra):
    return parse_request(json.dumps({"model": "tiny", "messages": messages, **extra}).encode(), "tiny")


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


def test_limits_are_checked(model):
    with pytest.raises(ServeConfigError, match="--max-messages 0 must be an int >= 1"):
        RequestLimits(max_messages=0)
    with pytest.raises(ServeConfigError):
        Engine(model, model_id="tiny", policy="vanilla", limits="many", start=False)


def test_too_many_messages_a_too_large_body_and_too_many_tokens_are_openai_errors(model):
    limits = RequestLimits(max_messages=7, max_body_bytes=3000, max_history_tokens=300)
    engine = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2, limits=limits)
    client = TestClient(create_app(engine))
    try:
        post = lambda messages: client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages})  # noqa: E731
        assert post(history(3)).status_code == 200
        r = post(history(4))
        assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_messages"
        assert "--max-messages" in r.json()["error"]["message"]
        r = post(history(1, user=800))
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        r = client.post("/v1/chat/completions", content=b"{" + b" " * 5000 + b"}",
                        headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = post(history(2, user=100, reply=100))
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "--max-history-tokens" in r.json()["error"]["message"]
    finally:
        engine.close()


def test_at_most_n_new_compressions_per_request_older_turns_dropped_and_recorded(model):
    limits = RequestLimits(max_compressions=3)
    engine = Engine(model, model_id="tiny", policy="reply-soft-compress", max_tokens=2, limits=limits)
    try:
        answer = engine.submit(request(history(6, seed=10))).result(timeout=300)
        assert engine.compress.computed == 3  # the three newest replies; the three oldest turns dropped
        (bounded,) = [r for r in answer.plan.decisions.records if r.get("event") == "bounded_work"]
        assert bounded["dropped_oldest_turns"] == 3 and "max_compressions=3" in bounded["reason"]
        from rhea.serve.engine import rhea_usage

        assert [t["index"] for t in rhea_usage(answer, engine.policy_name)["turns"]] == [3, 4, 5]
        # the same conversation again: its cached latents are reused, three more of the older ones computed
        engine.submit(request(history(6, seed=10))).result(timeout=300)
        assert engine.compress.computed == 6
        engine.submit(request(history(6, seed=10))).result(timeout=300)
        assert engine.compress.computed == 6  # all six cached now: nothing new, nothing dropped
    finally:
        engine.close()


def test_a_cancelled_request_is_skipped_and_close_fails_waiting_ones(model):
    engine = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2, max_batch=1)
    try:
        engine.pause()
        gone = engine.submit(request(history(1)))
        kept = engine.submit(request(history(1)))
        assert engine.cancel(gone) and engine.waiting == 1
        with pytest.raises(RequestCancelled):
            gone.result(timeout=5)
        engine.resume()
        assert kept.result(timeout=120).text is not None and engine.served == 1
        engine.pause()
        waiting = engine.submit(request(history(1)))
    finally:
        t0 = time.perf_counter()
        engine.close()
    assert time.perf_counter() - t0 < 5
    with pytest.raises(APIError, match="shutting down"):
        waiting.result(timeout=1)


def test_a_running_generation_stops_when_cancelled(model):
    engine = Engine(model, model_id="tiny", policy="vanilla", max_tokens=400, max_batch=1)
    try:
        started = []
        future = engine.submit(request(history(1)), on_event=lambda kind, payload: started.append(kind))
        deadline = time.time() + 120
        while "text" not in started and time.time() < deadline:
            time.sleep(0.01)
        assert engine.cancel(future)
        with pytest.raises(RequestCancelled):
            future.result(timeout=30)
    finally:
        engine.close()


def test_small_requests_go_before_a_huge_one_queued_ahead(model):
    engine = Engine(model, model_id="tiny", policy="vanilla", max_tokens=1, max_batch=1)
    try:
        engine.pause()
        order = []
        huge = engine.submit(request(history(40, user=50, reply=50)))
        small = [engine.submit(request(history(1, seed=s))) for s in range(3)]
        huge.add_done_callback(lambda f: order.append("huge"))
        for f in small:
            f.add_done_callback(lambda f: order.append("small"))
        engine.resume()
        huge.result(timeout=300)
        assert order == ["small", "small", "small", "huge"]
    finally:
        engine.close()


def test_a_client_that_disconnects_cancels_its_queued_request_over_http(model):
    import socket
    import threading

    import httpx
    import uvicorn

    engine = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 60
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        engine.pause()  # the request waits in the queue until its client gives up
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=1.0,
                       json={"model": "tiny", "messages": history(1)})
        deadline = time.time() + 10
        while engine.cancelled == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert engine.cancelled == 1 and engine.waiting == 0
        engine.resume()
        assert engine.served == 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()


def test_a_huge_request_being_prepared_lets_small_ones_through_and_keeps_its_plan(model):
    """The huge request's past replies are compressed a slice at a time; a small request arriving
    meanwhile is answered before the huge one, which is sent back to the queue and later answered
    with the plan it gets when alone (the turns kept were fixed when the worker first took it)."""
    def slow_engine():
        engine = Engine(model, model_id="tiny", policy="reply-soft-compress", max_tokens=2, max_batch=1,
                        limits=RequestLimits(max_compressions=12))
        inner = engine.compress.compress

        def slow(texts):  # a compression that takes as long as the embedded model's under load
            time.sleep(0.1)
            return inner(texts)

        engine.compress.compress = slow
        engine.PREPARE_SLICE_S, engine.YIELD_MIN_PENDING = 0.05, 2  # twelve compressions count as huge here
        return engine

    huge_messages = history(20, seed=30)
    alone = slow_engine()
    try:
        expected = alone.submit(request(huge_messages)).result(timeout=300)
        assert alone.requeued == 0 and alone.compress.computed == 12
    finally:
        alone.close()
    engine = slow_engine()
    try:
        order = []
        huge = engine.submit(request(huge_messages))
        huge.add_done_callback(lambda f: order.append("huge"))
        deadline = time.monotonic() + 60
        while engine.compress.computed == 0 and time.monotonic() < deadline:  # the huge one is being prepared
            time.sleep(0.01)
        small = engine.submit(request(history(1, seed=99)))
        small.add_done_callback(lambda f: order.append("small"))
        small_answer = small.result(timeout=300)
        answer = huge.result(timeout=300)
        assert order == ["small", "huge"] and engine.requeued >= 1
        assert small_answer.completion_tokens <= 2
        # the same turns kept and the same reply as alone, although the cache gained latents meanwhile
        assert [(d.turn, d.tier) for d in answer.plan.decisions.turns] == \
            [(d.turn, d.tier) for d in expected.plan.decisions.turns]
        assert answer.text == expected.text and answer.prompt_tokens == expected.prompt_tokens
        (bounded,) = [r for r in answer.plan.decisions.records if r.get("event") == "bounded_work"]
        assert bounded["dropped_oldest_turns"] == 8
        assert engine.compress.computed == 12 + 1  # its twelve replies and the small one's, each once
    finally:
        engine.close()


def test_a_huge_request_taken_first_steps_out_of_its_batch_for_the_small_ones(model):
    """A huge request that has waited longest goes first and takes a batch of small ones with it; while it is
    prepared, its smaller fellows are not kept waiting for its whole preparation: it steps out of the batch,
    they are answered, and it is answered after them."""
    engine = Engine(model, model_id="tiny", policy="reply-soft-compress", max_tokens=2, max_batch=8,
                    limits=RequestLimits(max_compressions=12), start=False)
    inner = engine.compress.compress

    def slow(texts):
        time.sleep(0.1)
        return inner(texts)

    engine.compress.compress = slow
    engine.PREPARE_SLICE_S, engine.YIELD_MIN_PENDING, engine.FAIR_WAIT_S = 0.05, 2, 0.0  # the oldest goes first
    try:
        order = []
        huge = engine.submit(request(history(20, seed=30)))
        huge.add_done_callback(lambda f: order.append("huge"))
        smalls = [engine.submit(request(history(1, seed=90 + i))) for i in range(3)]
        for small in smalls:
            small.add_done_callback(lambda f: order.append("small"))
        engine.start()
        for small in smalls:
            assert small.result(timeout=300).completion_tokens <= 2
        huge.result(timeout=300)
        assert order == ["small"] * 3 + ["huge"] and engine.requeued >= 1
    finally:
        engine.close()
