"""Saves that survive kills and concurrent writers, and loads that name what is wrong with a folder."""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import threading
import time

import pytest
import torch

from rhea.session import ChatSession, SessionError
from rhea.storage import SaveInProgressError, StorageError, locked


def _session(model, turns):
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=2)
    for text in turns:
        chat.send(text)
    return chat


def _same(back, chat) -> bool:
    """Whether a loaded session is `chat`: its turns and its latents."""
    if [t.to_dict() for t in back.conversation] != [t.to_dict() for t in chat.conversation]:
        return False
    a = back.policy.state_dict()["state"]["episodic"]["latents"]
    b = chat.policy.state_dict()["state"]["episodic"]["latents"]
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


@pytest.fixture(scope="module")
def two_sessions():
    """A tiny model and two sessions of it (read only: the tests save and load them, never send)."""
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    return model, _session(model, ["the cat sat"]), _session(model, ["the dog ran", "a red ball"])


def _save_forever(sessions, path, first, done):
    i = first
    while True:
        sessions[i % 2].save(path)
        i += 1
        with done.get_lock():
            done.value += 1


def test_a_kill_at_any_point_of_a_save_leaves_the_old_or_the_new_session(two_sessions, tmp_path):
    model, a, b = two_sessions
    path = tmp_path / "s"
    a.save(path)
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(0)
    seen = {"a": 0, "b": 0, "old copy": 0}
    for trial in range(100):
        done = ctx.Value("i", 0)
        child = ctx.Process(target=_save_forever, args=((a, b), path, trial, done), daemon=True)
        child.start()
        deadline = time.monotonic() + 60
        while done.value < 1 and time.monotonic() < deadline:  # one whole save first, then a kill in a later one
            time.sleep(0.002)
        assert done.value >= 1, "the saving child made no save in 60 s"
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        if not path.exists():
            seen["old copy"] += 1  # killed between the two renames of the swap
        back = ChatSession.load(path, model)
        assert _same(back, a) or _same(back, b)
        seen["a" if _same(back, a) else "b"] += 1
    print("kill-during-save outcomes:", seen)
    assert seen["a"] and seen["b"], seen  # the kills landed in different saves
    b.save(path)  # a save after a kill cleans what the killed one left beside the target
    assert _same(ChatSession.load(path, model), b)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.lock", "s"]


def test_concurrent_saves_from_threads_leave_one_whole_session(two_sessions, tmp_path):
    tiny_model = two_sessions[0]
    sessions = [_session(tiny_model, [f"turn {i} of {k}" for i in range(1 + k % 2)]) for k in range(4)]
    path = tmp_path / "s"
    errors = []

    def work(chat):
        try:
            for _ in range(5):
                chat.save(path)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,)) for c in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    back = ChatSession.load(path, tiny_model)
    assert sum(_same(back, c) for c in sessions) == 1


def _save_n(chat, path, n):
    for _ in range(n):
        chat.save(path)


def test_concurrent_saves_from_processes_leave_one_whole_session(two_sessions, tmp_path):
    model, a, b = two_sessions
    path = tmp_path / "s"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_n, args=(c, path, 10)) for c in (a, b, a, b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    back = ChatSession.load(path, model)
    assert _same(back, a) or _same(back, b)


def test_a_save_can_refuse_instead_of_waiting(two_sessions, tmp_path):
    _, a, _ = two_sessions
    path = tmp_path / "s"
    with locked(path):
        with pytest.raises(SaveInProgressError, match="being saved"):
            a.save(path, wait=False)
    assert not path.exists()
    a.save(path, wait=False)


def test_a_file_in_the_way_is_a_named_error_before_anything_is_written(two_sessions, tmp_path):
    _, a, _ = two_sessions
    (tmp_path / "f").write_text("keep me")
    with pytest.raises(StorageError, match="a file is in the way"):
        a.save(tmp_path / "f")
    assert (tmp_path / "f").read_text() == "keep me"


def test_a_folder_mixing_two_saves_fails_loudly(two_sessions, tmp_path):
    model, a, b = two_sessions
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    shutil.copy(tmp_path / "b" / "session.safetensors", tmp_path / "a" / "session.safetensors")
    with pytest.raises(SessionError, match="mix of files of two saves"):
        ChatSession.load(tmp_path / "a", model)


def test_a_flipped_bit_in_the_latents_fails_loudly(two_sessions, tmp_path):
    model, a, _ = two_sessions
    a.save(tmp_path / "a")
    data = bytearray((tmp_path / "a" / "session.safetensors").read_bytes())
    data[-3] ^= 0x10
    (tmp_path / "a" / "session.safetensors").write_bytes(bytes(data))
    with pytest.raises(SessionError, match="session.safetensors is not the file its save wrote"):
        ChatSession.load(tmp_path / "a", model)


def _edit(key_path, value):
    def change(payload):
        *parents, last = key_path
        target = payload
        for k in parents:
            target = target[k]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
        return payload
    return change


_DELETE = object()
ALTERED = [
    ("not an object", lambda p: [p], "holds a JSON list"),
    ("format", _edit(["format"], "rhea-session/9"), "unknown session format"),
    ("no model", _edit(["model"], _DELETE), "'model' is missing"),
    ("model a list", _edit(["model"], [1]), "'model' must be a JSON object"),
    ("hidden size a string", _edit(["model", "hidden_size"], "32"), "model.hidden_size must be an int"),
    ("n_mem missing", _edit(["model", "n_mem"], _DELETE), "model.n_mem must be an int"),
    ("no policy name", _edit(["policy", "name"], _DELETE), "policy.name must be"),
    ("unknown policy", _edit(["policy", "name"], "nope"), "does not hold a session this version can restore"),
    ("policy state a list", _edit(["policy", "state"], []), "policy.config and policy.state"),
    ("max_new_tokens 0", _edit(["max_new_tokens"], 0), "'max_new_tokens' must be an int >= 1"),
    ("max_new_tokens null", _edit(["max_new_tokens"], None), "'max_new_tokens' must be an int >= 1"),
    ("records a dict", _edit(["records"], {}), "'records' must be a JSON list"),
    ("record with an unknown field", lambda p: (p["records"][0].update(extra=1), p)[1], "unknown fields extra"),
    ("record lacking a field", lambda p: (p["records"][0].pop("turn"), p)[1], "lacks turn"),
    ("record a number", _edit(["records", 0], 3), "records[0] must be an object"),
    ("turns missing", _edit(["conversation", "turns"], _DELETE), "conversation.turns must be a list"),
    ("turn a string", _edit(["conversation", "turns"], ["hi"]), "conversation.turns must be a list of turn"),
    ("turn without text", lambda p: (p["conversation"]["turns"][0].pop("user"), p)[1],
     "does not hold a session this version can restore"),
    ("latent reference removed", lambda p: (p["policy"]["state"]["episodic"].update(latents={"__tensor__": "x"}), p)[1],
     "does not hold a session this version can restore"),
    ("episodic state a string", lambda p: (p["policy"]["state"].update(episodic="x"), p)[1],
     "does not hold a session this version can restore"),
    ("adapter unknown", _edit(["adapter"], "other"), "does not hold a session this version can restore"),
    ("generation kwargs a list", _edit(["generation_kwargs"], []), "'generation_kwargs' must be a JSON object"),
]


@pytest.mark.parametrize("name,change,fragment", ALTERED, ids=[a[0] for a in ALTERED])
def test_an_altered_session_json_is_a_named_error(two_sessions, tmp_path, name, change, fragment):
    model, a, _ = two_sessions
    path = tmp_path / "s"
    a.save(path)
    payload = change(json.loads((path / "session.json").read_text()))
    (path / "session.json").write_text(json.dumps(payload))
    with pytest.raises(SessionError, match="corrupted"):  # the recorded digest catches any edit first
        ChatSession.load(path, model)
    with pytest.raises(SessionError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        ChatSession.load(path, model, verify=False)
    (path / "manifest.json").unlink()  # a folder saved without digests is checked field by field
    with pytest.raises(SessionError):
        ChatSession.load(path, model)


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not utf-8", b"{\"format\": "])
def test_an_unreadable_session_json_is_a_named_error(two_sessions, tmp_path, content):
    model, a, _ = two_sessions
    a.save(tmp_path / "s")
    (tmp_path / "s" / "session.json").write_bytes(content)
    with pytest.raises(SessionError, match="corrupted"):
        ChatSession.load(tmp_path / "s", model, verify=False)


def test_the_repl_load_of_a_bad_folder_prints_the_error_and_keeps_the_conversation(two_sessions, tmp_path):
    from rhea.session.repl import repl

    model, a, b = two_sessions
    b.save(tmp_path / "bad")
    (tmp_path / "bad" / "session.json").write_text(json.dumps({"format": "rhea-session/1"}))
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=2)
    chat.conversation = a.conversation
    out = []
    back = repl(chat, [f"/load {tmp_path / 'bad'}", f"/load {tmp_path / 'missing'}"], out.append)
    text = "".join(out)
    assert back is chat and len(back.conversation) == 1
    assert text.count("nothing loaded: the current conversation of 1 turns is kept") == 2
    assert "corrupted" in text and "not a saved session" in text


def test_a_save_never_replaces_a_folder_of_other_files(two_sessions, tmp_path):
    _, a, _ = two_sessions
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(StorageError, match="holds other files"):
        a.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    (tmp_path / "empty").mkdir()
    a.save(tmp_path / "empty")  # an empty folder, or one a save wrote, is fine
    a.save(tmp_path / "empty")


def test_a_kill_between_the_two_renames_loads_the_old_copy_and_the_next_save_recovers(two_sessions, tmp_path):
    model, a, b = two_sessions
    path = tmp_path / "s"
    a.save(path)
    os.rename(path, tmp_path / ".s.old")  # the state a kill after the first rename of the swap leaves
    (tmp_path / ".s.new-0123").mkdir()  # and a half-built new copy
    (tmp_path / ".s.new-0123" / "session.json").write_text("{")
    assert _same(ChatSession.load(path, model), a)
    b.save(path)
    assert _same(ChatSession.load(path, model), b)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.lock", "s"]
