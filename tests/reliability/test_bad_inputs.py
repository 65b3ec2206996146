"""Bad input, as a hostile or careless user gives it: each is a named error saying what was wrong,
raised before any model load or write (CLI), or an OpenAI-style 4xx body (server), never a traceback."""
from __future__ import annotations

import json

import pytest

from rhea.cli import main
from rhea.errors import RheaError

NOT_UTF8 = b'{"a": "caf\xe9"}\n'


@pytest.fixture
def files(tmp_path):
    (tmp_path / "latin1.jsonl").write_bytes(NOT_UTF8)
    (tmp_path / "latin1.yaml").write_bytes(b"optim:\n  lr: 0.001 # caf\xe9\n")
    (tmp_path / "ok.yaml").write_text(f"run:\n  output_dir: {tmp_path / 'run'}\n")
    (tmp_path / "data.yaml").write_text(f"data:\n  path: {tmp_path / 'latin1.jsonl'}\nrun:\n  output_dir: {tmp_path / 'run'}\n")
    (tmp_path / "outfile.yaml").write_text(f"run:\n  output_dir: {tmp_path / 'afile' / 'sub'}\n")
    (tmp_path / "afile").write_text("a file, not a folder")
    (tmp_path / "list.yaml").write_text("- lora_r\n- 8\n")
    (tmp_path / "broken.yaml").write_text("lora_r: [8\n")
    return tmp_path


def _no_model_load(monkeypatch):
    """Any model load fails the test: these errors must come first."""
    import rhea.modeling.loading as loading

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the bad input was refused")

    for name in ("load_rhea_model", "load_base_model"):
        monkeypatch.setattr(loading, name, refuse, raising=False)
    import rhea.training.trainer as trainer

    monkeypatch.setattr(trainer, "build_model", refuse)


CLI = [
    ("suite empty", ["bench", "--suite", "", "--out", "{d}/o"], "names no suite"),
    ("suite commas", ["bench", "--suite", " , ", "--out", "{d}/o"], "names no suite"),
    ("policies empty", ["bench", "--suite", "state-tracking", "--policies", "", "--out", "{d}/o"], "names no policy"),
    ("bench data not utf-8", ["bench", "--suite", "long-horizon", "--judge-local", "none", "--data",
                              "{d}/latin1.jsonl", "--out", "{d}/o"], "is not UTF-8 text (byte 0xe9 at offset 10"),
    ("bench out a file", ["bench", "--suite", "state-tracking", "--out", "{d}/afile"], "is a file, not a directory"),
    ("bench out under a file", ["bench", "--suite", "state-tracking", "--out", "{d}/afile/x"],
     "which is a file"),
    ("bench out unwritable", ["bench", "--suite", "state-tracking", "--out", "/proc/rhea-x"], "cannot be written"),
    ("train config not utf-8", ["train", "--config", "{d}/latin1.yaml"], "is not UTF-8 text (byte 0xe9"),
    ("train config a folder", ["train", "--config", "{d}"], "is a directory"),
    ("train lr a word", ["train", "--config", "{d}/ok.yaml", "--set", "optim.lr=abc"],
     "optim.lr='abc' must be a number"),
    ("train epochs a float", ["train", "--config", "{d}/ok.yaml", "--set", "optim.epochs=1.5"],
     "optim.epochs=1.5 must be an integer"),
    ("train flag a number", ["train", "--config", "{d}/ok.yaml", "--set", "run.cpu=3"], "run.cpu=3 must be true or false"),
    ("train base model a number", ["train", "--config", "{d}/ok.yaml", "--set", "model.base_model=7"],
     "model.base_model=7 must be a string"),
    ("train data not utf-8", ["train", "--config", "{d}/data.yaml"], "latin1.jsonl:1 is not UTF-8 text"),
    ("train output dir under a file", ["train", "--config", "{d}/outfile.yaml"], "run.output_dir"),
    ("calibrate triples not utf-8", ["calibrate", "--model", "{d}", "--out", "{d}/c", "--triples", "{d}/latin1.jsonl"],
     "is not UTF-8 text"),
    ("calibrate out a file", ["calibrate", "--model", "{d}", "--out", "{d}/afile"], "is a file, not a directory"),
    ("export out a file", ["export", "smollm2-135m", "--out", "{d}/afile"], "is a file, not a directory; pass the path "
                                                                          "of a new (or empty) directory"),
    ("export out under a file", ["export", "smollm2-135m", "--out", "{d}/afile/x"], "which is a file"),
    ("export out not empty", ["export", "smollm2-135m", "--out", "{d}"], "exists and is not empty"),
    ("export out unwritable", ["export", "smollm2-135m", "--out", "/proc/rhea-x"], "cannot be written"),
    ("shrink out a file", ["shrink", "smollm2-135m", "--out", "{d}/afile", "--compress-rank", "4"],
     "is a file, not a directory"),
    ("shrink out under a file", ["shrink", "smollm2-135m", "--out", "{d}/afile/x", "--compress-rank", "4"],
     "which is a file"),
    ("train-acr config a folder", ["train-acr", "--config", "{d}"], "config file"),
    ("train-acr config not utf-8", ["train-acr", "--config", "{d}/latin1.yaml"], "is not UTF-8 text (byte 0xe9"),
    ("train-acr config not yaml", ["train-acr", "--config", "{d}/broken.yaml"], "is not valid YAML"),
    ("train-acr config a list", ["train-acr", "--config", "{d}/list.yaml"], "holds a list, not a mapping"),
    ("train-acr output dir a file", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/afile"],
     "output_dir {d}/afile is a file, not a directory"),
    ("bench data a folder", ["bench", "--suite", "mt-eval-recollection", "--data", "{d}", "--out", "{d}/o"],
     "is a directory; pass the path of the benchmark's data file"),
    ("serve cache dir under a file", ["serve", "--cache-dir", "{d}/afile/x"], "which is a file"),
    ("judge a file", ["judge", "{d}/afile"], "is a file; pass the --out folder"),
]


@pytest.mark.parametrize("name,argv,fragment", CLI, ids=[c[0] for c in CLI])
def test_bad_command_line_input_is_one_named_error_line(files, monkeypatch, capsys, name, argv, fragment):
    _no_model_load(monkeypatch)
    before = sorted(p.name for p in files.iterdir())
    code = main([a.format(d=files) for a in argv])
    err = capsys.readouterr().err
    assert code == 1 and fragment.format(d=files) in err, err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(f"rhea {argv[0]}: error: ")
    assert sorted(p.name for p in files.iterdir()) == before  # nothing written


def test_the_named_errors_are_rhea_errors(files):
    from rhea.storage import StorageError, check_writable_directory
    from rhea.training.config import TrainConfig

    with pytest.raises(StorageError):
        check_writable_directory(files / "afile", "--out")
    with pytest.raises(RheaError, match="must be a number"):
        TrainConfig.from_dict({"optim": {"lr": "1e-4"}})
    assert TrainConfig.from_dict({"optim": {"lr": 1}}).optim.lr == 1  # an int is a number


# ------------------------------------------------------------------ the server
fastapi = pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from rhea.serve.app import create_app
    from rhea.serve.engine import Engine
    from rhea.testing import tiny_rhea

    engine = Engine(tiny_rhea(), model_id="tiny", policy="reply-soft-compress", max_tokens=2)
    yield TestClient(create_app(engine), raise_server_exceptions=False)
    engine.close()


def _messages(*extra):
    return [{"role": "user", "content": "hi"}, *extra, {"role": "user", "content": "and?"}]


SERVER = [
    ("nested JSON", b'{"model": "tiny", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests"),
    ("5,000-digit integer", b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": '
     + b"9" * 5000 + b"}", "cannot be read"),
    ("over-long past reply", json.dumps({"model": "tiny", "messages": _messages(
        {"role": "assistant", "content": " ".join(["cat"] * 3000)})}).encode(), "past assistant reply 1"),
    ("not UTF-8", b'{"model": "tiny", "messages": [{"role": "user", "content": "caf\xe9"}]}', "not valid JSON"),
]


@pytest.mark.parametrize("name,body,fragment", SERVER, ids=[s[0] for s in SERVER])
def test_bad_requests_are_openai_400s(client, name, body, fragment):
    r = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/static/%00", "/static/a%00b", "/static/" + "x" * 5000, "/static/..%2f..%2fetc/passwd"])
def test_odd_static_paths_are_404s(client, path):
    r = client.get(path)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_a_reply_budget_over_the_window_says_to_lower_max_new_tokens():
    from rhea.context import ContextOverflowError
    from rhea.session import ChatSession
    from rhea.testing import tiny_rhea

    with pytest.raises(ContextOverflowError, match="leaves no room") as info:  # tiny model window: 512
        ChatSession(tiny_rhea(), policy="vanilla", max_new_tokens=600).send("hi there")
    assert "lower max_new_tokens below 512" in str(info.value) and "under 1 tokens" not in str(info.value)
