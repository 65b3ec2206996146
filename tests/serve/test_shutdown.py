"""SIGTERM on a busy `rhea serve` (the embedded SmolLM2-135M as a real process): the process exits
within a few seconds (``--shutdown-timeout`` to finish, then the running request is cancelled),
every client gets an answer or a clean OpenAI error body (503 ``shutting_down``), never a dropped
connection, and the latent cache folder holds no half-written ``*.tmp`` file."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]
httpx = pytest.importorskip("httpx")

MODEL = "smollm2-135m"
ROOT = Path(__file__).resolve().parents[2]
SHUTDOWN_TIMEOUT = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
        return json.loads(r.read())


def _start(port: int, log: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rhea.cli", "serve", "--model", MODEL, "--port", str(port),
                             "--max-tokens", "8", "--threads", "1", "--log-level", "warning", "--cache-dir", str(cache),
                             "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), "--max-batch", "1"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    deadline = time.time() + 240
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rhea serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            _health(port)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"rhea serve did not answer /health within 240 s: {log.read_text()[-2000:]}")


def _long_history(turns: int) -> list[dict]:
    """`turns` past turns with distinct replies: each reply is compressed anew, so the request runs long."""
    out = []
    for i in range(turns):
        out += [{"role": "user", "content": f"Remember item {i}: a box of {i} blue marbles."},
                {"role": "assistant", "content": f"I will remember that item {i} is a box of {i} blue marbles."}]
    return out + [{"role": "user", "content": "How many marbles are in item 7?"}]


def test_sigterm_on_a_busy_server_exits_within_seconds_answering_every_client(tmp_path):
    port, log, cache = _free_port(), tmp_path / "serve.log", tmp_path / "cache"
    server = _start(port, log, cache)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    outcomes: dict[str, object] = {}

    def post(name: str, body: dict) -> None:
        try:
            r = httpx.post(url, json={"model": MODEL, **body}, timeout=120)
            outcomes[name] = (r.status_code, r.text)
        except Exception as e:  # noqa: BLE001 - a dropped connection is what the test must not see
            outcomes[name] = e

    try:
        clients = [threading.Thread(target=post, args=("long", {"messages": _long_history(40), "max_tokens": 8}))]
        clients[0].start()
        deadline = time.time() + 120
        while _health(port)["cache"]["latents"].get("computed", 0) == 0:  # its replies are being compressed
            assert time.time() < deadline, "the long request never started"
            time.sleep(0.05)
        queued = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": True}
        served = _health(port)["served"]
        clients.append(threading.Thread(target=post, args=("streamed", queued)))
        clients[-1].start()
        while "streamed" not in outcomes and (h := _health(port))["queue"]["waiting"] == 0 and h["served"] == served:
            assert time.time() < deadline, "the streamed request never reached the server"
            time.sleep(0.02)  # SIGTERM only once the server holds it (a later client is refused, rightly)
        t0 = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
        exited_s = time.monotonic() - t0
        for c in clients:
            c.join(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
    assert exited_s < 5.0, f"rhea serve took {exited_s:.1f} s to exit after SIGTERM: {log.read_text()[-2000:]}"
    assert code in (0, -signal.SIGTERM), log.read_text()[-2000:]  # uvicorn re-raises the signal once shut down
    for name, outcome in outcomes.items():
        assert isinstance(outcome, tuple), f"{name}: the connection was dropped ({outcome!r})"
        status, text = outcome
        if status == 200:  # answered in time: a completion, or a stream ending in its finish chunk or an error event
            assert "chat.completion" in text and ("[DONE]" in text or '"choices"' in text), text
            assert "shutting_down" in text or '"finish_reason"' in text, text
        else:
            assert status == 503 and json.loads(text)["error"]["code"] == "shutting_down", (name, status, text)
    assert outcomes["long"][0] == 503 or "shutting_down" not in outcomes["long"][1]
    assert not list(cache.rglob("*.tmp")), sorted(cache.rglob("*"))
    assert list(cache.rglob("*.safetensors")), "the long request's finished compressions were kept"
