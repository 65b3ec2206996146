"""`rhea serve` answers long histories within the window, and refuses a message that alone cannot fit
with OpenAI's 400 ``context_length_exceeded`` before any compute."""
from __future__ import annotations

import random

import pytest

from rhea.testing import _WORDS, tiny_rhea

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from rhea.serve.app import create_app  # noqa: E402
from rhea.serve.engine import Engine  # noqa: E402


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def served():
    engine = Engine(tiny_rhea(), model_id="tiny", policy="rhea", max_tokens=4,
                    policy_kwargs={"scorer": "bm25", "recognizer": None})
    yield engine, TestClient(create_app(engine))
    engine.close()


def _history(turns: int, user: int, reply: int) -> list[dict]:
    messages = [{"role": "system", "content": "always answer in french ."}]
    for i in range(turns):
        messages += [{"role": "user", "content": words(user, i)}, {"role": "assistant", "content": words(reply, 100 + i)}]
    return messages + [{"role": "user", "content": "what color is the cat ?"}]


def test_a_long_history_is_answered_within_the_window_with_the_budget_in_the_trace(served):
    engine, client = served
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": _history(30, 150, 450),
                                                  "rhea": {"trace": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["prompt_tokens"] + 4 <= 512
    budget = body["rhea"]["budget"]
    assert budget == {k: v for k, v in next(x for x in body["rhea"]["records"] if x.get("event") == "budget").items()
                      if k != "event"}
    assert budget["window"] == 512 and budget["max_new_tokens"] == 4 and budget["rendered_tokens"] <= 508
    notes = [t["note"] for t in body["rhea"]["turns"]]
    assert any("reason=budget" in n for n in notes)
    assert body["rhea"]["instructions"] == ["always answer in french ."]


def test_the_request_max_tokens_shrinks_the_budget(served):
    _, client = served
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": _history(10, 100, 300),
                                                  "max_tokens": 200, "rhea": {"trace": True}})
    assert r.status_code == 200, r.text
    budget = r.json()["rhea"]["budget"]
    assert budget["prompt_tokens"] == 312 and r.json()["usage"]["prompt_tokens"] <= 312


def test_a_message_alone_over_the_window_is_a_400_before_compute(served, monkeypatch):
    engine, client = served
    replayed = []
    monkeypatch.setattr(engine.session.policy, "catch_up", lambda conversation: replayed.append(conversation))
    messages = _history(5, 50, 50)[:-1] + [{"role": "user", "content": words(700, 9)}]
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert "Split the message" in err["message"]
    assert replayed == []  # refused before the past turns were replayed (recognizer, compression)
