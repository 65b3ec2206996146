"""The page at `/` of `rhea serve`, driven in a real headless Chromium (Debian's chromium +
chromium-driver, through selenium) against the real server on the embedded SmolLM2-135M.

The page is loaded, messages are sent through its form (an instruction, then two more), and after
the second and the third what it renders in the Memory panel (instruction block, each past turn's tier and score, tokens fed / full / saved) is checked
against the ``rhea`` object the server returns for the same messages, fetched directly (greedy
decoding: the same request gives the same reply and the same context). A screenshot is kept
under the test's tmp_path, and copied to ``$RHEA_KEEP_SCREENSHOT/serve_page.png`` when that
environment variable names a folder (e.g. ``RHEA_KEEP_SCREENSHOT=benchmarks/results``).

Without chromium, chromedriver or selenium the tests skip, saying what to install; CI installs
them (.ci/run).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]

MODEL = "smollm2-135m"
MAX_TOKENS = 12
FIRST = "From now on, always answer in French."
SECOND = "I am planning a trip to Japan in April."
THIRD = "How many legs does a spider have?"
#: the library's plans call a left-out turn "drop"; the page shows it as "dropped"
TIER_WORDS = {"drop": "dropped"}
STATIC = Path(__file__).resolve().parents[2] / "rhea" / "serve" / "static"


def _browser_paths() -> tuple[str, str]:
    """(chromium binary, chromedriver) or skip with what to install."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed: pip install -e '.[dev]'")
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    if not chrome or not driver:
        pytest.skip("Chromium and chromedriver are needed for the page test: "
                    "apt-get install -y chromium chromium-driver (CI's .ci/run installs them)")
    return chrome, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes, str]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read(), r.headers.get("Content-Type", "")


def _post_json(url: str, body: dict, timeout: float = 120.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"POST {url} -> HTTP {e.code}: {e.read().decode(errors='replace')}") from None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`rhea serve` on the embedded model on a free loopback port; yields its base URL."""
    _browser_paths()  # skip before loading a model when the browser is missing
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-c", "import sys; from rhea.cli import main; sys.exit(main())", "serve",
           "--model", MODEL, "--host", "127.0.0.1", "--port", str(port), "--max-tokens", str(MAX_TOKENS)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"rhea serve exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
            try:
                if _get(base + "/v1/models", timeout=2)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"rhea serve did not answer within 240 s:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    chrome, driver_path = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    profile = tempfile.mkdtemp(prefix="rhea-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait_state(drv, states: tuple[str, ...], timeout: float = 180.0) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, timeout, poll_frequency=0.2).until(
        lambda d: d.execute_script("return document.body.dataset.state") in states)
    return drv.execute_script("return document.body.dataset.state")


def _send(drv, text: str) -> str:
    from selenium.webdriver.common.by import By

    box = drv.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    drv.find_element(By.ID, "send").click()
    return _wait_state(drv, ("idle", "error"))


def _text(element) -> str:
    return element.get_attribute("textContent")


def _keep(png: Path) -> None:
    folder = os.environ.get("RHEA_KEEP_SCREENSHOT")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, Path(folder) / "serve_page.png")


def test_page_is_served_from_the_static_folder(server):
    status, body, ctype = _get(server + "/")
    assert status == 200 and ctype.startswith("text/html")
    assert body == (STATIC / "index.html").read_bytes()
    for name, kind in (("app.js", "javascript"), ("style.css", "css")):
        status, body, ctype = _get(f"{server}/static/{name}")
        assert status == 200 and kind in ctype and body == (STATIC / name).read_bytes()


def _page_messages(drv) -> list[dict]:
    """The conversation as the page shows it: user and assistant bubbles, in order."""
    from selenium.webdriver.common.by import By

    return [{"role": b.get_attribute("data-role"), "content": _text(b.find_element(By.CSS_SELECTOR, ".text"))}
            for b in drv.find_elements(By.CSS_SELECTOR, "#log > li.msg")]


def _check_memory_panel(drv, server: str, users: list[str]) -> dict:
    """The Memory panel equals the ``rhea`` object the server returns for the same messages."""
    from selenium.webdriver.common.by import By

    messages = _page_messages(drv)
    assert [m["role"] for m in messages] == ["user", "assistant"] * len(users)
    assert [m["content"] for m in messages[::2]] == users
    assert all(m["content"].strip() for m in messages[1::2])  # the streamed replies arrived

    # the same request straight to the server, without streaming: greedy, so the same reply and context
    direct = _post_json(server + "/v1/chat/completions",
                        {"model": MODEL, "messages": messages[:-1], "stream": False, "rhea": True})
    assert direct["choices"][0]["message"]["content"] == messages[-1]["content"]
    rhea = direct["rhea"]

    assert drv.find_element(By.ID, "memory").get_attribute("data-updates") == str(len(users))
    assert _text(drv.find_element(By.ID, "policy")) == rhea["policy"]
    assert [_text(li) for li in drv.find_elements(By.CSS_SELECTOR, "#instructions > li")] == rhea["instructions"]

    rows = drv.find_elements(By.CSS_SELECTOR, "#turns-body > tr")
    assert len(rows) == len(rhea["turns"]) == len(users) - 1  # every past turn, one row each
    for row, turn in zip(rows, rhea["turns"]):
        tier = TIER_WORDS.get(turn["tier"], turn["tier"])
        assert tier in ("raw", "latent", "dropped"), turn
        assert row.get_attribute("data-tier") == tier
        assert int(row.get_attribute("data-turn-index")) == turn["index"]
        badge = row.find_element(By.CSS_SELECTOR, ".tier")
        assert _text(badge) == tier and f"tier-{tier}" in badge.get_attribute("class")
        score = _text(row.find_element(By.CSS_SELECTOR, ".score"))
        assert score == ("—" if turn["score"] is None else f"{turn['score']:.3f}")
        shown = _text(row.find_element(By.CSS_SELECTOR, ".user"))
        assert users[turn["index"]].startswith(shown.removesuffix(" …")), (shown, turn)

    fed, full, saved = rhea["tokens_fed"], rhea["tokens_full_history"], rhea["tokens_saved"]
    assert _text(drv.find_element(By.ID, "tokens-fed")) == f"{fed:,}"
    assert _text(drv.find_element(By.ID, "tokens-full")) == f"{full:,}"
    assert _text(drv.find_element(By.ID, "tokens-saved")) == f"{saved:,}"
    if full:
        assert _text(drv.find_element(By.ID, "tokens-saved-pct")) == f"{100 * saved / full:.1f}%"
    return rhea


def test_messages_render_the_memory_of_the_last_turn(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    drv = browser
    drv.get(server + "/")
    assert _wait_state(drv, ("idle", "error"), timeout=30) == "idle", _text(drv.find_element(By.ID, "error"))
    assert drv.find_element(By.ID, "model").get_attribute("value") == MODEL

    users: list[str] = []
    for text in (FIRST, SECOND, THIRD):
        users.append(text)
        if text == THIRD:  # the first two replies stream (SSE), the third comes as one JSON body
            drv.find_element(By.ID, "stream").click()
            assert not drv.find_element(By.ID, "stream").is_selected()
        state = _send(drv, text)
        assert state == "idle", f"the page shows an error: {_text(drv.find_element(By.ID, 'error'))}"
        if len(users) >= 2:
            rhea = _check_memory_panel(drv, server, users)
            # the instruction of the first message is in the instruction block, whatever its turn's tier
            assert any("French" in s for s in rhea["instructions"]), rhea["instructions"]

    assert not [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    png = tmp_path / "serve_page.png"
    assert drv.save_screenshot(str(png)) and png.stat().st_size > 10_000
    _keep(png)

    # a narrow window: the Memory panel moves under the chat instead of squeezing it
    chat, memory = drv.find_element(By.ID, "chat"), drv.find_element(By.ID, "memory")
    assert memory.rect["x"] > chat.rect["x"] + chat.rect["width"] - 1  # side by side at 1280 px
    drv.set_window_size(500, 900)
    assert memory.rect["y"] >= chat.rect["y"] + chat.rect["height"] - 1
    assert drv.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    drv.set_window_size(1280, 900)


def test_a_server_error_is_shown_and_the_message_kept(server, browser):
    from selenium.webdriver.common.by import By

    drv = browser
    drv.get(server + "/")
    assert _wait_state(drv, ("idle", "error"), timeout=30) == "idle"
    # a model this server does not serve: the server answers 404 model_not_found
    drv.execute_script("const s = document.getElementById('model'); s.add(new Option('no-such-model', 'no-such-model'));"
                       "s.value = 'no-such-model';")
    assert _send(drv, "Hello?") == "error"
    error = drv.find_element(By.ID, "error")
    assert error.is_displayed() and "no-such-model" in _text(error) and "model_not_found" in _text(error)
    assert drv.find_element(By.ID, "input").get_attribute("value") == "Hello?"  # back in the box to retry
    assert drv.find_element(By.CSS_SELECTOR, "#log > li.msg-user").get_attribute("data-failed") == "true"
    assert not drv.find_elements(By.CSS_SELECTOR, "#log > li.msg-assistant")
