"""`rhea serve` checks its arguments before loading any model."""
from __future__ import annotations

import pytest

from rhea.cli import build_parser, main


@pytest.mark.parametrize("argv, message", [
    (["--port", "0"], "--port 0 must be between 1 and 65535"),
    (["--port", "70000"], "--port 70000 must be between 1 and 65535"),
    (["--model", "./no/such/dir"], "does not exist"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--policy", "vanilla", "--tau-low", "0.2"], "set the rhea policies"),
    (["--max-queue", "0"], "--max-queue 0 must be >= 1"),
    (["--cache-entries", "-1"], "--cache-entries -1 must be >= 0"),
    (["--max-messages", "0"], "--max-messages 0 must be >= 1"),
    (["--max-body-bytes", "0"], "--max-body-bytes 0 must be >= 1"),
    (["--max-history-tokens", "-5"], "--max-history-tokens -5 must be >= 1"),
    (["--max-compressions", "0"], "--max-compressions 0 must be >= 1"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout -1.0 must be >= 0"),
])
def test_bad_arguments_fail_before_loading(argv, message, capsys, monkeypatch):
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "load_rhea_model", lambda *a, **k: pytest.fail("model loaded before the check"))
    assert main(["serve", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rhea serve: error:") and message in err, err


def test_cache_dir_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["serve", "--cache-dir", str(f)]) == 1
    assert "is a file" in capsys.readouterr().err


def test_serve_is_registered_with_its_options():
    args = build_parser().parse_args(["serve", "--port", "8123", "--max-batch", "2"])
    assert (args.command, args.port, args.max_batch, args.policy, args.host) == ("serve", 8123, 2, "rhea", "127.0.0.1")
    assert (args.max_messages, args.max_body_bytes, args.max_history_tokens, args.max_compressions) == (
        1000, 8 * 1024 * 1024, 500_000, 64)
