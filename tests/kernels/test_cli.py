"""`rhea kernels` (rhea_kernels/cli.py): info, check, time, and its errors."""
import pytest

from rhea_kernels import cli


def test_info_names_the_backend_for_cpu(capsys):
    assert cli.main(["kernels", "info"]) == 0
    out = capsys.readouterr().out
    assert "cpp_extension" in out and "backend_cpu" in out
    assert cli.info()["backend_cpu"] in ("cpp", "reference")
    for op in ("turn_scores", "turn_scores_and_tiers", "anchored_attention_fwd", "anchored_attention_bwd"):
        assert f"op {op}" in out  # one line per op: its backend per device and its sources
    assert "anchored_attention_cuda_route" in out  # said without a GPU too


def test_info_says_the_anchored_route(monkeypatch):
    for route, words in (("auto", "N >= 4096"), ("split", "every fp16/bf16"), ("triton", "Triton kernel for every"),
                         ("nope", "invalid")):
        monkeypatch.setenv("RHEA_ANCHORED_ROUTE", route)
        assert words in cli.info()["anchored_attention_cuda_route"]


def test_check_passes_on_cpu(capsys):
    assert cli.main(["kernels", "check"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "36/36 cases match the reference on cpu" in out
    assert out.count("decode_linear") == 3
    # the fused scoring-and-tiers path (what retrieval calls) is checked: scores and tiers
    assert out.count("turn_scores_and_tiers") == 6 and "tiers differ" in out


def test_time_reports_both_implementations(capsys):
    assert cli.main(["kernels", "time", "turn_scores", "--shape", "1,4,2,16"]) == 0
    assert "speed-up" in capsys.readouterr().out
    assert cli.main(["kernels", "time", "turn_scores_and_tiers", "--shape", "1,4,2,16"]) == 0
    assert "speed-up" in capsys.readouterr().out
    assert cli.main(["kernels", "time", "decode_linear", "--shape", "8,64,96"]) == 0
    assert "speed-up" in capsys.readouterr().out
    res = cli.time_op("anchored_attention", (1, 2, 1, 33, 16), cli.torch.device("cpu"), cli.torch.float32,
                      prefix=5, backward=True)
    assert res["kernel"] > 0 and res["reference"] > 0


@pytest.mark.parametrize("argv, message", [
    (["time", "turn_scores", "--shape", "1,64,8"], "expected 4 positive integers"),
    (["time", "turn_scores", "--shape", "1,x,8,4"], "expected 4 positive integers"),
    (["time", "anchored_attention", "--shape", "1,3,2,8,16"], "multiple of Hkv"),
    (["time", "anchored_attention", "--shape", "1,2,1,8,16", "--prefix", "9"], "between 0 and N=8"),
])
def test_bad_arguments_get_a_named_error(argv, message, capsys):
    assert cli.main(["kernels", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cuda_without_a_gpu_is_refused(capsys):
    if cli.torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert cli.main(["kernels", "check", "--device", "cuda"]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_rhea_cli_lists_the_kernels_command():
    from rhea.cli import build_parser

    assert build_parser().parse_args(["kernels", "info"]).func is cli._main
