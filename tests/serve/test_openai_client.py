"""`rhea serve` as a real process on the embedded SmolLM2-135M, driven by the official `openai`
client: a 3-turn conversation (one turn streamed) that reads the ``rhea`` usage object, then a
kill -9 and a restart mid-conversation: the next request gets the same greedy reply and the
same context decisions as before the restart (the server keeps no conversation state)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rhea.constants import TIERS

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]
openai = pytest.importorskip("openai")

MODEL = "smollm2-135m"
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rhea.cli", "serve", "--model", MODEL, "--port", str(port),
                             "--max-tokens", "8", "--threads", "1", "--log-level", "warning"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    deadline = time.time() + 240
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rhea serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"rhea serve did not answer /health within 240 s: {log.read_text()[-2000:]}")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)  # no graceful shutdown: nothing may depend on one
        proc.wait(timeout=30)


def test_openai_client_multi_turn_streaming_rhea_usage_and_restart(tmp_path):
    port, log = _free_port(), tmp_path / "serve.log"
    server = _start(port, log)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-needed", max_retries=0)
        assert [m.id for m in client.models.list().data] == [MODEL]
        messages = [{"role": "user", "content": "From now on, always answer in French."}]
        first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                               extra_body={"rhea": True})
        r1 = first.choices[0].message.content
        assert first.usage.completion_tokens <= 8 and first.usage.total_tokens == (
            first.usage.prompt_tokens + first.usage.completion_tokens)
        assert first.model_extra["rhea"]["instructions"] == ["From now on, always answer in French."]

        messages += [{"role": "assistant", "content": r1}, {"role": "user", "content": "My code word is PELICAN."}]
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, stream=True,
                                                stream_options={"include_usage": True}, extra_body={"rhea": True})
        pieces, finish, usage, streamed_rhea = [], None, None, None
        for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                if chunk.choices[0].finish_reason:
                    finish, streamed_rhea = chunk.choices[0].finish_reason, chunk.model_extra["rhea"]
            if chunk.usage:
                usage = chunk.usage
        r2 = "".join(pieces)
        assert finish in ("stop", "length") and usage.completion_tokens <= 8
        assert [t["index"] for t in streamed_rhea["turns"]] == [0]
        assert streamed_rhea["turns"][0]["user"] == messages[0]["content"]
        assert streamed_rhea["tokens_full_history"] >= streamed_rhea["tokens_fed"] > 0

        messages += [{"role": "assistant", "content": r2}, {"role": "user", "content": "What is the capital of Italy?"}]
        third = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                               extra_body={"rhea": True})
        obj = third.model_extra["rhea"]
        assert [t["user"] for t in obj["turns"]] == [messages[0]["content"], messages[2]["content"]]
        assert all(t["tier"] in TIERS for t in obj["turns"])
        plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
        assert plain.model_extra.get("rhea") is None  # standard clients see plain OpenAI
        assert plain.choices[0].message.content == third.choices[0].message.content  # greedy

        messages += [{"role": "assistant", "content": third.choices[0].message.content},
                     {"role": "user", "content": "What was my code word?"}]
        before = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                                extra_body={"rhea": True})
        _kill(server)
        server = _start(port, log)
        after = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                               extra_body={"rhea": True})
        assert after.choices[0].message.content == before.choices[0].message.content
        assert after.model_extra["rhea"] == before.model_extra["rhea"]
        assert after.usage == before.usage
    finally:
        _kill(server)
