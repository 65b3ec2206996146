"""`rhea serve` on a tiny random model through FastAPI's TestClient: every route, every error
case, the SSE format, usage counts, the opt-in ``rhea`` object, the queue and batching."""
from __future__ import annotations

import json

import pytest

from rhea.constants import TIERS
from rhea.testing import tiny_rhea

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from rhea.serve.app import create_app  # noqa: E402
from rhea.serve.engine import Engine  # noqa: E402
from rhea.serve.protocol import parse_request  # noqa: E402

POLICY_KWARGS = {"scorer": "bm25", "recognizer": None}  # no MiniLM: rules-only recognizer, BM25 scores
HISTORY = [
    {"role": "system", "content": "always answer in french ."},
    {"role": "user", "content": "the cat is blue"},
    {"role": "assistant", "content": "yes the cat is blue ."},
    {"role": "user", "content": "from now on answer in json ."},
    {"role": "assistant", "content": "ok json ."},
    {"role": "user", "content": "what color is the cat ?"},
]


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


@pytest.fixture(scope="module")
def engine(model):
    eng = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=POLICY_KWARGS, max_tokens=4)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def client(engine):
    return TestClient(create_app(engine))


def _post(client, **body):
    return client.post("/v1/chat/completions", json={"model": "tiny", "messages": HISTORY, **body})


def _error(response, status, code=None, param=None):
    assert response.status_code == status, response.text
    err = response.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert "Traceback" not in response.text
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def _sse(client, **body):
    with client.stream("POST", "/v1/chat/completions", json={"model": "tiny", "messages": HISTORY, "stream": True,
                                                               **body}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_health_models_and_unknown_routes(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny" and health["policy"] == "rhea"
    assert health["queue"]["max_queue"] == 64 and "latents" in health["cache"]
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"
    _error(client.get("/v1/models/gpt-4"), 404, "model_not_found")
    _error(client.get("/v2/nothing"), 404, "not_found")
    _error(client.get("/v1/chat/completions"), 405, "method_not_allowed")


def test_page_and_static_files(client):
    from rhea.serve.app import STATIC

    r = client.get("/")
    if (STATIC / "index.html").is_file():
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    else:
        _error(r, 404, "not_found")
    _error(client.get("/static/../../cli.py"), 404, "not_found")  # nothing outside the static folder
    _error(client.get("/static/no-such-file.js"), 404, "not_found")


def test_completion_is_plain_openai_without_the_flag(client, engine):
    body = _post(client).json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny" and "rhea" not in body
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert 1 <= usage["completion_tokens"] <= 4  # --max-tokens default of this engine
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # prompt_tokens: the rendered plan (chat template included), as the model saw it
    req = parse_request(json.dumps({"model": "tiny", "messages": HISTORY}).encode(), "tiny")
    from rhea.context import render

    plan = engine.rebuild(req).plan
    assert usage["prompt_tokens"] == int(render(plan, engine.model.tokenizer).input_ids.shape[1])


def test_rhea_object_is_the_plan_a_chat_session_makes(client, model):
    """The server's plan for a message list equals a ChatSession's after the same turns, and so
    does the greedy reply."""
    from rhea.session import ChatSession

    chat = ChatSession(model, policy="rhea", max_new_tokens=4, policy_kwargs=POLICY_KWARGS)
    users = ["the cat is blue", "from now on answer in json .", "what color is the cat ?"]
    replies = [chat.send(u) for u in users[:2]]
    messages = [m for u, a in zip(users, replies) for m in ({"role": "user", "content": u},
                                                            {"role": "assistant", "content": a})]
    messages.append({"role": "user", "content": users[2]})
    body = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "rhea": True}).json()
    expected_reply = chat.send(users[2])
    plan = chat.last_plan
    obj = body["rhea"]
    assert obj["policy"] == "rhea"
    assert obj["instructions"] == plan.decisions.instructions == ["from now on answer in json ."]
    assert [(t["index"], t["tier"]) for t in obj["turns"]] == [(d.turn, d.tier) for d in plan.decisions.turns]
    assert [t["score"] for t in obj["turns"]] == pytest.approx([d.score for d in plan.decisions.turns])
    assert [t["components"] for t in obj["turns"]] == [d.components for d in plan.decisions.turns]
    assert [t["user"] for t in obj["turns"]] == users[:2]
    assert all(t["tier"] in TIERS for t in obj["turns"])
    led = plan.ledger
    assert (obj["tokens_fed"], obj["tokens_full_history"], obj["tokens_saved"]) == (
        led.text_tokens + led.latent_slots, led.full_history_tokens, led.saved_tokens)
    assert body["choices"][0]["message"]["content"] == expected_reply


def test_system_messages_enter_the_instruction_block(client):
    obj = _post(client, rhea=True).json()["rhea"]
    assert obj["instructions"][0] == "always answer in french ."
    assert "from now on answer in json ." in obj["instructions"]
    trace = _post(client, rhea={"trace": True}).json()["rhea"]
    assert "records" in trace and all("note" in t for t in trace["turns"])


def test_long_user_text_is_shortened_in_the_rhea_object(client):
    long = "the cat " * 60
    msgs = [{"role": "user", "content": long}, {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "and the dog ?"}]
    turn = client.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs, "rhea": True}
                       ).json()["rhea"]["turns"][0]
    assert len(turn["user"]) == 80 and turn["user"].endswith("…") and long.startswith(turn["user"][:79])


def test_streaming_format_matches_the_non_streamed_reply(client):
    plain = _post(client, rhea=True).json()
    chunks = _sse(client, rhea=True, stream_options={"include_usage": True})
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert finish[0]["rhea"] == plain["rhea"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
    # without the flags: no rhea object, no usage chunk
    bare = _sse(client)
    assert all("rhea" not in c and "usage" not in c for c in bare) and bare[-1]["choices"][0]["finish_reason"]


@pytest.mark.parametrize("body, status, code, param", [
    (b"{not json", 400, "invalid_json", None),
    (b"[1, 2]", 400, "invalid_json", None),
    ({"model": "gpt-4", "messages": HISTORY}, 404, "model_not_found", "model"),
    ({"messages": HISTORY}, 400, None, "model"),
    ({"model": "tiny", "messages": []}, 400, "empty_messages", "messages"),
    ({"model": "tiny"}, 400, None, "messages"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "  "}]}, 400, "empty_message", "messages[0].content"),
    ({"model": "tiny", "messages": HISTORY[:3]}, 400, "last_message_not_user", "messages"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
     400, None, "messages[1].role"),
    ({"model": "tiny", "messages": [{"role": "assistant", "content": "a"}]}, 400, None, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "a"}]}, 400, None, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "tool", "content": "a"}]}, 400, None, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, None,
     "messages[0].content"),
    ({"model": "tiny", "messages": HISTORY, "n": 2}, 400, None, "n"),
    ({"model": "tiny", "messages": HISTORY, "temperature": 3}, 400, None, "temperature"),
    ({"model": "tiny", "messages": HISTORY, "top_p": 0}, 400, None, "top_p"),
    ({"model": "tiny", "messages": HISTORY, "seed": "x"}, 400, None, "seed"),
    ({"model": "tiny", "messages": HISTORY, "stream": "yes"}, 400, None, "stream"),
    ({"model": "tiny", "messages": HISTORY, "max_tokens": 0}, 400, None, "max_tokens"),
    ({"model": "tiny", "messages": HISTORY, "stop": [""]}, 400, None, "stop"),
    ({"model": "tiny", "messages": HISTORY, "tools": [{"type": "function"}]}, 400, "unsupported_parameter", "tools"),
    ({"model": "tiny", "messages": HISTORY, "rhea": "yes"}, 400, None, "rhea"),
])
def test_bad_requests_get_openai_errors(client, body, status, code, param):
    r = client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}) \
        if isinstance(body, bytes) else \
        client.post("/v1/chat/completions", json=body)
    _error(r, status, code, param)


def test_an_empty_reply_in_the_history_is_accepted(client):
    """A model can answer nothing; the next request carries that empty reply back."""
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "and ?"}]
    obj = client.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs, "rhea": True}).json()["rhea"]
    assert [t["index"] for t in obj["turns"]] == [0]


def test_over_long_input_is_context_length_exceeded(client, model):
    long = " ".join(["cat"] * (model.max_context + 10))  # one word-level token per word
    msgs = [{"role": "user", "content": long}]
    _error(client.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs}), 400,
           "context_length_exceeded", "messages")
    # streamed: refused before the stream starts, as a plain JSON error
    _error(client.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs, "stream": True}), 400,
           "context_length_exceeded", "messages")


def test_internal_errors_are_a_generic_500(client, engine, monkeypatch):
    def boom(request):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(engine, "rebuild", boom)
    err = _error(_post(client), 500, "internal_error")
    assert "secret" not in err["message"] and err["type"] == "server_error"


def test_an_error_after_the_stream_started_is_an_error_event(client, monkeypatch):
    import rhea.session.generation as generation

    def half_then_fail(model, plan, *, on_text=None, **kwargs):
        on_text("partial")
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(generation, "generate_from_plan", half_then_fail)
    with client.stream("POST", "/v1/chat/completions",
                       json={"model": "tiny", "messages": HISTORY, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.status_code == 200 and lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[1]["choices"][0]["delta"]["content"] == "partial"
    assert events[-1]["error"]["code"] == "internal_error" and "secret" not in json.dumps(events)


def test_max_tokens_and_stop(client):
    r = _post(client, max_completion_tokens=2).json()
    assert r["usage"]["completion_tokens"] == 2 and r["choices"][0]["finish_reason"] == "length"
    full = _post(client, max_tokens=4).json()["choices"][0]["message"]["content"]
    words = full.split()
    assert len(words) >= 2, full
    cut = _post(client, max_tokens=4, stop=words[1]).json()
    assert cut["choices"][0]["message"]["content"] == full[:full.index(words[1], len(words[0]))].strip()
    assert cut["choices"][0]["finish_reason"] == "stop"
    streamed = _sse(client, max_tokens=4, stop=[words[1]])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in streamed if c["choices"])
    assert text == cut["choices"][0]["message"]["content"]


def test_sampling_with_a_seed_is_reproducible(client):
    a = _post(client, temperature=1.0, seed=7).json()["choices"][0]["message"]["content"]
    b = _post(client, temperature=1.0, seed=7).json()["choices"][0]["message"]["content"]
    assert a == b


def test_engine_settings_are_checked(model):
    from rhea.serve.errors import ServeConfigError

    for bad in ({"max_queue": 0}, {"max_batch": 0}, {"max_tokens": 0}, {"cache_entries": -1}, {"batch_wait_ms": -1}):
        with pytest.raises(ServeConfigError):
            Engine(model, model_id="tiny", policy="vanilla", start=False, **bad)


def test_system_message_refused_where_the_policy_would_lose_it(model):
    eng = Engine(model, model_id="tiny", policy="rhea-no-im", policy_kwargs={"scorer": "bm25"}, max_tokens=2)
    try:
        _error(TestClient(create_app(eng)).post("/v1/chat/completions", json={"model": "tiny", "messages": HISTORY}),
               400, "system_not_supported", "messages")
    finally:
        eng.close()


def test_vanilla_takes_system_messages_as_its_system_prompt(model):
    eng = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2)
    try:
        req = parse_request(json.dumps({"model": "tiny", "messages": HISTORY}).encode(), "tiny")
        plan = eng.rebuild(req).plan
        assert plan.messages[0] == {"role": "system", "content": "always answer in french ."}
        req = parse_request(json.dumps({"model": "tiny", "messages": HISTORY[1:]}).encode(), "tiny")
        assert eng.rebuild(req).plan.messages[0]["role"] == "user"  # not kept from the request before
    finally:
        eng.close()


def test_full_queue_answers_503_with_retry_after(model):
    eng = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2, max_queue=1)
    client = TestClient(create_app(eng))
    try:
        eng.pause()
        req = parse_request(json.dumps({"model": "tiny", "messages": HISTORY}).encode(), "tiny")
        waiting = eng.submit(req)
        r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": HISTORY})
        _error(r, 503, "queue_full")
        assert int(r.headers["Retry-After"]) >= 1
        eng.resume()
        assert waiting.result(timeout=60).completion_tokens <= 2  # the queued request was not lost
        assert client.post("/v1/chat/completions", json={"model": "tiny", "messages": HISTORY}).status_code == 200
    finally:
        eng.close()


def test_waiting_requests_are_batched_and_not_mixed_up(model):
    eng = Engine(model, model_id="tiny", policy="rhea", policy_kwargs=POLICY_KWARGS, max_tokens=3, max_batch=8)
    try:
        eng.pause()
        convs = []
        for k, word in enumerate(["red", "green", "blue"]):
            msgs = [{"role": "user", "content": f"my color is {word}"}, {"role": "assistant", "content": "ok"}] * (k + 1)
            msgs.append({"role": "user", "content": f"what is my color {word} ?"})
            convs.append(msgs)
        reqs = [parse_request(json.dumps({"model": "tiny", "messages": m}).encode(), "tiny") for m in convs]
        futures = [eng.submit(r) for r in reqs]
        eng.resume()
        answers = [f.result(timeout=120) for f in futures]
        assert eng.batches == 1 and eng.batched_rows == 3
        for req, answer in zip(reqs, answers):  # each answer carries its own conversation and plan
            assert answer.plan.messages[-1]["content"] == req.query
            assert len(answer.plan.decisions.turns) == len(req.conversation)
            assert answer.conversation is req.conversation
            assert 1 <= answer.completion_tokens <= 3
    finally:
        eng.close()


def test_a_burst_arriving_just_after_the_first_request_joins_its_batch(model):
    import time

    eng = Engine(model, model_id="tiny", policy="vanilla", max_tokens=2, max_batch=4, batch_wait_ms=3000)
    try:
        reqs = [parse_request(json.dumps({"model": "tiny", "messages": [{"role": "user", "content": f"hi {w}"}]}
                                         ).encode(), "tiny") for w in ("one", "two", "three")]
        first = eng.submit(reqs[0])
        time.sleep(0.2)  # the worker holds the first request in its batch window meanwhile
        rest = [eng.submit(r) for r in reqs[1:]]
        answers = [f.result(timeout=60) for f in [first, *rest]]
        assert eng.batches == 1 and eng.batched_rows == 3
        assert [a.plan.messages[-1]["content"] for a in answers] == ["hi one", "hi two", "hi three"]
    finally:
        eng.close()
