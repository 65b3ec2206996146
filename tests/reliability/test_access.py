"""`rhea serve` access control: API key (OpenAI's 401 body), JSON-only POSTs, Host check, CORS off by default."""
from __future__ import annotations

import pytest

from rhea.serve.access import AccessPolicy, is_loopback
from rhea.serve.errors import ServeConfigError

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def engine():
    from rhea.serve.engine import Engine
    from rhea.testing import tiny_rhea

    eng = Engine(tiny_rhea(), model_id="tiny", policy="vanilla", max_tokens=1)
    yield eng
    eng.close()


def _client(engine, **policy):
    from rhea.serve.app import create_app

    return TestClient(create_app(engine, AccessPolicy(**policy)))


def test_the_api_key_is_enforced_with_openais_401_body(engine):
    client = _client(engine, api_key="sk-right")
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "sk-right"},
                    {"Authorization": "Basic sk-right"}):
        for r in (client.post("/v1/chat/completions", json=BODY, headers=headers),
                  client.get("/v1/models", headers=headers)):
            assert r.status_code == 401, (headers, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
            assert error["message"]
    ok = client.post("/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer sk-right"})
    assert ok.status_code == 200 and ok.json()["object"] == "chat.completion"
    assert client.get("/health").status_code == 200  # liveness stays open


def test_the_key_comes_from_the_environment_unless_given():
    assert AccessPolicy.for_server("127.0.0.1", environ={"RHEA_API_KEY": "k1"}).api_key == "k1"
    assert AccessPolicy.for_server("127.0.0.1", api_key="k2", environ={"RHEA_API_KEY": "k1"}).api_key == "k2"
    assert AccessPolicy.for_server("127.0.0.1", environ={}).api_key is None
    with pytest.raises(ServeConfigError, match="non-empty key"):
        AccessPolicy.for_server("127.0.0.1", api_key=" ", environ={})


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_post_that_is_not_json_is_refused_before_it_runs(engine, content_type):
    client = _client(engine)
    served = engine.served
    headers = {"Content-Type": content_type} if content_type else {}
    r = client.post("/v1/chat/completions", content=b'{"model": "tiny", "messages": [{"role": "user", '
                    b'"content": "hi"}]}', headers=headers)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert engine.served == served


def test_json_with_a_charset_is_accepted(engine):
    r = _client(engine).post("/v1/chat/completions", content=b'{"model": "tiny", "messages": [{"role": "user", '
                             b'"content": "hi"}], "max_tokens": 1}',
                             headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200


def test_cors_is_off_by_default_and_on_for_listed_origins(engine):
    off = _client(engine)
    r = off.post("/v1/chat/completions", json=BODY, headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    pre = off.options("/v1/chat/completions", headers={"Origin": "https://evil.example",
                                                         "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
    on = _client(engine, cors_origins=("https://app.example",))
    pre = on.options("/v1/chat/completions", headers={"Origin": "https://app.example",
                                                       "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in pre.headers["access-control-allow-headers"]
    r = on.post("/v1/chat/completions", json=BODY, headers={"Origin": "https://app.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    r = on.post("/v1/chat/completions", json=BODY, headers={"Origin": "https://other.example"})
    assert "access-control-allow-origin" not in r.headers


def test_the_host_check_refuses_other_names(engine):
    client = _client(engine, allowed_hosts=("localhost", "127.0.0.1", "::1"))
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"):
        assert client.get("/health", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8000", "localhost.evil.example", ""):
        r = client.get("/v1/models", headers={"Host": host})
        assert r.status_code == 421 and r.json()["error"]["code"] == "host_not_allowed", host


def test_the_default_hosts_follow_the_bind_address():
    assert set(AccessPolicy.for_server("127.0.0.1").allowed_hosts) >= {"localhost", "127.0.0.1"}
    assert AccessPolicy.for_server("0.0.0.0").allowed_hosts == ()
    assert AccessPolicy.for_server("127.0.0.1", allowed_hosts="*").allowed_hosts == ()
    assert AccessPolicy.for_server("0.0.0.0", allowed_hosts="chat.example.com").allowed_hosts == ("chat.example.com",)
    with pytest.raises(ServeConfigError, match="names no host"):
        AccessPolicy.for_server("0.0.0.0", allowed_hosts=" , ")
    with pytest.raises(ServeConfigError, match="scheme://host"):
        AccessPolicy.for_server("0.0.0.0", cors_origins="app.example")
    assert is_loopback("::1") and not is_loopback("10.0.0.1")


def test_the_serve_command_checks_its_access_options_before_loading(monkeypatch, capsys):
    from rhea.cli import main
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "load_rhea_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["serve", "--allowed-hosts", ",", "--model", "smollm2-135m"]) == 1
    assert "names no host" in capsys.readouterr().err
