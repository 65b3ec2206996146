"""Regression tests for the hostile inputs that `benchmarks/hostile_inputs.py` found answered with a traceback,
a 500, a silent acceptance or a check after the model load: each is a named error, before any model load."""
from __future__ import annotations

import json
import math

import pytest

from rhea.cli import main
from rhea.errors import RheaError

HUGE = "9" * 40


def _no_model_load(monkeypatch):
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the bad input was refused")

    for module, name in ((loading, "load_zoo_model"), (loading, "load_base_model"), (zoo, "load_base_model")):
        monkeypatch.setattr(module, name, refuse)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ok.yaml").write_text("optim:\n  lr: 0.0001\n")
    (tmp_path / "nested.json").write_bytes(b'{"a": ' * 100_000 + b"1" + b"}" * 100_000)
    (tmp_path / "huge.jsonl").write_bytes(b'{"n": ' + b"9" * 5000 + b"}\n")
    (tmp_path / "list.jsonl").write_bytes(b"[1, 2]\n")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "nested.yaml").write_bytes(b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n")
    (tmp_path / "broken.yaml").write_bytes(b"optim: [1\n")
    (tmp_path / "adir").mkdir()
    return tmp_path


CLI = [
    ("chat tau nan", ["chat", "--tau-low", "nan"], "must be a number from -1 to 1"),
    ("chat tau 40 digits", ["chat", "--tau-high", HUGE], "must be a number from -1 to 1"),
    ("chat threads 40 digits", ["chat", "--threads", HUGE], "is too large"),
    ("chat model empty", ["chat", "--model", ""], "names no model"),
    ("bench turns 40 digits", ["bench", "--suite", "state-tracking", "--turns", HUGE, "--out", "{d}/o"], "is too large"),
    ("bench tau 1e40", ["bench", "--suite", "efficiency", "--policies", "vanilla,rhea", "--tau-high", "1e40",
                        "--out", "{d}/o"], "must be a cosine threshold from -1 to 1"),
    ("bench policy-option a word for a number", ["bench", "--suite", "state-tracking", "--policies", "rhea",
                                                 "--policy-option", "rhea.recent_raw=abc", "--out", "{d}/o"],
     "rhea.recent_raw takes a number"),
    ("bench out empty", ["bench", "--suite", "state-tracking", "--out", ""], "names no directory"),
    ("bench data nested", ["bench", "--suite", "long-horizon", "--judge-local", "none", "--data", "{d}/nested.json",
                           "--out", "{d}/o"], "nested too deeply"),
    ("bench data huge int", ["bench", "--suite", "long-horizon", "--judge-local", "none", "--data", "{d}/huge.jsonl",
                             "--out", "{d}/o"], "cannot be read"),
    ("calibrate n 40 digits", ["calibrate", "--model", "{d}", "--out", "{d}/c", "--n", HUGE], "is too large"),
    ("calibrate keep 2", ["calibrate", "--model", "{d}", "--out", "{d}/c", "--keep", "2"], "must be a number from 0 to 1"),
    ("calibrate triples a list", ["calibrate", "--model", "{d}", "--out", "{d}/c", "--triples", "{d}/list.jsonl"],
     "expected a JSON object"),
    ("serve max-tokens 40 digits", ["serve", "--max-tokens", HUGE], "is too large"),
    ("serve shutdown-timeout nan", ["serve", "--shutdown-timeout", "nan"], "must be >= 0 seconds (and at most 86400)"),
    ("serve served name empty", ["serve", "--served-model-name", ""], "--served-model-name is empty"),
    ("shrink rank 40 digits", ["shrink", "{d}/adir", "--out", "{d}/s", "--compress-rank", HUGE], "a LoRA rank is at most 65536"),
    ("export out empty", ["export", "smollm2-135m", "--out", ""], "--out is empty"),
    ("kernels shape 40 digits", ["kernels", "time", "decode_linear", "--shape", f"{HUGE},2,3"], "at most 2**31 - 1"),
    ("train config nested", ["train", "--config", "{d}/nested.yaml"], "too deeply"),
    ("train config broken", ["train", "--config", "{d}/broken.yaml"], "is not valid YAML at line 2"),
    ("train model empty", ["train", "--config", "{d}/ok.yaml", "--model", "", "--set", "run.output_dir={d}/r"],
     "model.base_model=''"),
    ("train n_mem 0", ["train", "--config", "{d}/ok.yaml", "--set", "model.n_mem=0", "--set", "run.output_dir={d}/r"],
     "model.n_mem=0"),
    ("train grad_accum 40 digits", ["train", "--config", "{d}/ok.yaml", "--set", f"optim.grad_accum={HUGE}",
                                    "--set", "run.output_dir={d}/r"], "is too large"),
    ("train data.path missing", ["train", "--config", "{d}/ok.yaml", "--set", "data.path={d}/nope.jsonl",
                                 "--set", "run.output_dir={d}/r"], "does not exist"),
    ("train data.path a list", ["train", "--config", "{d}/ok.yaml", "--set", "data.path={d}/list.jsonl",
                                "--set", "run.output_dir={d}/r"], "not an object"),
    ("train data.path empty", ["train", "--config", "{d}/ok.yaml", "--set", "data.path={d}/empty.jsonl",
                               "--set", "run.output_dir={d}/r"], "holds no records"),
    ("train data.path a folder", ["train", "--config", "{d}/ok.yaml", "--set", "data.path={d}/adir",
                                  "--set", "run.output_dir={d}/r"], "without a saved `datasets` dataset"),
    ("train-acr lr a word", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--set", "lr=abc"], "wrong type"),
    ("train-acr output_dir null", ["train-acr", "--cpu-demo", "--set", "output_dir="], "output_dir=None"),
    ("train-acr epochs 40 digits", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--set", f"epochs={HUGE}"],
     "is too large"),
    ("train-acr tasks 40 digits", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--tasks", HUGE], "is too large"),
    ("train-acr tasks-file empty", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--tasks-file",
                                    "{d}/empty.jsonl"], "holds no tasks"),
    ("train-acr tasks-file nested", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--tasks-file",
                                     "{d}/nested.json"], "cannot read tasks"),
    ("train-acr device tpu", ["train-acr", "--cpu-demo", "--set", "output_dir={d}/a", "--device", "tpu"],
     "must be cpu, cuda or cuda:N"),
]


@pytest.mark.parametrize("name,argv,fragment", CLI, ids=[c[0] for c in CLI])
def test_hostile_command_lines_are_one_named_error_line(files, monkeypatch, capsys, name, argv, fragment):
    _no_model_load(monkeypatch)
    monkeypatch.chdir(files)
    before = sorted(p.name for p in files.iterdir())
    try:
        code = main([a.format(d=files) for a in argv])
    except SystemExit as e:  # argparse's usage error
        code = e.code
    err = capsys.readouterr().err
    assert code in (1, 2) and fragment in err, err
    assert "Traceback" not in err and "error:" in err.strip().splitlines()[-1]
    assert sorted(p.name for p in files.iterdir()) == before  # nothing written


# ------------------------------------------------------------------ configs, sessions
@pytest.mark.parametrize("data,fragment", [
    ({"lora_alpha": None}, "lora_alpha=None must be a number"), ({"base_model": 7}, "base_model=7"),
    ({"base_model": ""}, "base_model=''"), ({"extra": []}, "extra=[] must be a JSON object"),
    ({"base_hidden_size": "32"}, "base_hidden_size='32'"), ({"lora_dropout": "x"}, "lora_dropout='x'"),
])
def test_rhea_config_refuses_mistyped_fields(data, fragment):
    from rhea.modeling.config import RheaConfig

    with pytest.raises(RheaError, match="") as info:
        RheaConfig.from_dict(data)
    assert fragment in str(info.value)


@pytest.mark.parametrize("raw,fragment", [(b'{"n_mem": 4, "a": "caf\xe9"}', "not UTF-8"),
                                          (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "too deeply"),
                                          (b'{"n_mem": ' + b"9" * 5000 + b"}", "not valid JSON")])
def test_an_unreadable_rhea_config_is_a_config_error(tmp_path, raw, fragment):
    from rhea.modeling.config import RheaConfig

    (tmp_path / "rhea_config.json").write_bytes(raw)
    with pytest.raises(RheaError, match=fragment):
        RheaConfig.load(tmp_path)


@pytest.fixture(scope="module")
def saved_session(tmp_path_factory):
    from rhea.session import ChatSession
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=2)
    chat.send("the cat sat")
    return model, chat.save(tmp_path_factory.mktemp("s") / "s")


def _rehash(d):
    from rhea.storage import sha256_bytes

    files = {n: {"sha256": sha256_bytes((d / n).read_bytes())} for n in ("session.json", "session.safetensors")}
    (d / "manifest.json").write_text(json.dumps({"format": "rhea-manifest/1", "files": files}))


@pytest.mark.parametrize("alter,fragment", [
    (lambda p: p["generation_kwargs"].update(nope=1), "generation_kwargs.nope is not a generation option"),
    (lambda p: p["generation_kwargs"].update(temperature="hot"), "generation_kwargs.temperature='hot'"),
])
def test_a_session_with_bad_generation_options_is_refused(saved_session, tmp_path, alter, fragment):
    import shutil

    from rhea.session import ChatSession, SessionError

    model, src = saved_session
    d = tmp_path / "s"
    shutil.copytree(src, d)
    payload = json.loads((d / "session.json").read_text())
    alter(payload)
    (d / "session.json").write_text(json.dumps(payload))
    _rehash(d)
    with pytest.raises(SessionError, match=fragment):
        ChatSession.load(d, model)


@pytest.mark.parametrize("name,raw", [("session.json", b'{"a": ' * 100_000 + b"1" + b"}" * 100_000),
                                      ("session.json", b'{"max_new_tokens": ' + b"9" * 5000 + b"}"),
                                      ("manifest.json", b'{"a": ' * 100_000 + b"1" + b"}" * 100_000)])
def test_deep_or_huge_session_json_is_a_session_error(saved_session, tmp_path, name, raw):
    import shutil

    from rhea.session import ChatSession, SessionError

    model, src = saved_session
    d = tmp_path / "s"
    shutil.copytree(src, d)
    (d / name).write_bytes(raw)
    if name == "session.json":
        _rehash(d)
    with pytest.raises(SessionError):
        ChatSession.load(d, model)


def test_non_finite_latents_are_refused(saved_session, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from rhea.session import ChatSession, SessionError

    model, src = saved_session
    d = tmp_path / "s"
    shutil.copytree(src, d)
    tensors = load_file(d / "session.safetensors")
    name = next(k for k, v in tensors.items() if v.is_floating_point() and v.numel())
    tensors[name] = tensors[name].clone().fill_(math.nan)
    save_file(tensors, d / "session.safetensors")
    _rehash(d)
    with pytest.raises(SessionError, match="non-finite"):
        ChatSession.load(d, model)


# ------------------------------------------------------------------ the server
@pytest.mark.parametrize("extra,fragment", [({"seed": 10 ** 40}, "seed="), ({"seed": 2 ** 64}, "seed="),
                                            ({"n": 1.0}, "n=1.0"), ({"n": True}, "n=True"),
                                            ({"stream_options": []}, "stream_options must be an object")])
def test_request_fields_of_the_wrong_kind_are_400s(extra, fragment):
    from rhea.serve.errors import APIError
    from rhea.serve.protocol import parse_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(APIError, match="") as info:
        parse_request(json.dumps(body).encode(), "m")
    assert fragment in info.value.message and info.value.status == 400
    assert parse_request(json.dumps({**body, **{k: None for k in extra}}).encode(), "m").seed is None
