"""A `rhea bench` checkpoint damaged by a kill mid-write never blocks the run from resuming."""
from __future__ import annotations

import pytest

from rhea.eval.runner import run_suite
from rhea.session import ChatSession
from rhea.testing import tiny_rhea

RUN = dict(n_turns=5, n_episodes=1, suite_kwargs={"n_keys": 2}, max_new_tokens=3, progress=False)


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


def _interrupted(model, out, monkeypatch, after: int):
    sent = []
    original = ChatSession.send

    def crash(self, text, **kw):
        if len(sent) == after:
            raise KeyboardInterrupt
        sent.append(text)
        return original(self, text, **kw)

    monkeypatch.setattr(ChatSession, "send", crash)
    with pytest.raises(KeyboardInterrupt):
        run_suite(model, "state-tracking", ["recent-k"], out=out, **RUN)
    monkeypatch.setattr(ChatSession, "send", original)
    return out / "state" / "recent-k" / "0"


def _replies(result):
    return [t["reply"] for t in result["policies"]["recent-k"]["turns"]]


@pytest.fixture(scope="module")
def full(model, tmp_path_factory):
    return _replies(run_suite(model, "state-tracking", ["recent-k"], out=tmp_path_factory.mktemp("full"), **RUN))


@pytest.mark.parametrize("damage", ["empty session.json", "cut safetensors", "cut row", "empty config.json"])
def test_a_damaged_checkpoint_resumes_to_the_same_replies(model, full, tmp_path, monkeypatch, damage):
    state = _interrupted(model, tmp_path, monkeypatch, after=2)
    if damage == "empty session.json":
        (state / "session" / "session.json").write_text("")
    elif damage == "cut safetensors":
        data = (state / "session" / "session.safetensors").read_bytes()
        (state / "session" / "session.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "cut row":
        with open(state / "rows.jsonl", "a") as f:
            f.write('{"policy": "recent-k", "us')
    else:
        (tmp_path / "config.json").write_text("")
    with pytest.warns(RuntimeWarning, match="starts over") if damage != "cut row" else _nothing():
        resumed = run_suite(model, "state-tracking", ["recent-k"], out=tmp_path, **RUN)
    assert _replies(resumed) == full
    if damage == "cut row":  # the cut line was dropped, so the rows appended after it are read
        assert len((state / "rows.jsonl").read_text().splitlines()) == 5


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
