"""benchmarks/reconstruction_segments.py: per-segment accuracy under each block layout, on a tiny model."""
import json
from pathlib import Path

import pytest
import torch

from rhea.testing import tiny_rhea
from rhea.training.compressor import teacher_forced_accuracy, token_hits
from tests.repo_scripts import load_script
from tests.training.test_compressor import _write_data

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "reconstruction_segments.py"
TEXTS = ["a b c d e f g", "one two three four five six", "the cat is blue and red", "x y z w v u t"]


@pytest.fixture(scope="module")
def bench():
    return load_script(_PATH)


def test_layouts_reverse_the_blocks_and_pair_the_control(bench):
    model = tiny_rhea(n_mem=2)
    with torch.no_grad():
        lat = bench.layouts(model, TEXTS, 3, batch_size=3)
    assert set(lat) == set(bench.LAYOUTS)
    pieces, rev = lat["pieces"][0], lat["pieces reversed"][0]
    assert pieces.shape == rev.shape and pieces.shape[0] == 2 * 3  # 7 tokens in pieces of 3: three blocks of 2
    torch.testing.assert_close(rev[:2], pieces[-2:])
    torch.testing.assert_close(rev[-2:], pieces[:2])
    assert all(w.shape[0] == 2 for w in lat["whole"])
    torch.testing.assert_close(lat["control"][0], lat["pieces"][2])


def test_segments_split_the_same_hits_teacher_forced_accuracy_counts(bench):
    model = tiny_rhea(n_mem=2)
    with torch.no_grad():
        lat = model.compress_replies(TEXTS, chunk_tokens=3)
        hits = token_hits(model, TEXTS, lat)
        acc, counts = teacher_forced_accuracy(model, TEXTS, lat)
        seg = bench.segment_accuracy(model, TEXTS, lat, 3, batch_size=3)
    assert acc == [sum(h) / len(h) for h in hits] and counts == [len(h) for h in hits]
    h0, n0 = hits[0], 7  # "a b c d e f g": 7 tokens, then the end-of-turn tokens (left out of the segments)
    assert seg[0] == pytest.approx([sum(h0[0:3]) / 3, sum(h0[3:6]) / 3, sum(h0[6:n0]) / 1])
    out = bench.measure(model, TEXTS, 3, batch_size=3)
    assert list(out) == list(bench.LAYOUTS)
    assert [s["tokens"] for s in out["pieces"]] == [[0, 3], [3, 6], [6, 9]] and out["pieces"][0]["n"] == 4


def test_main_writes_json_and_png_and_checks_its_input(bench, tmp_path, capsys):
    data = tmp_path / "data"
    _write_data(data)
    from rhea.modeling import RheaConfig, RheaForCausalLM
    from rhea.testing import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    base = tiny_llama(len(tok))
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    RheaForCausalLM.from_base(base, tok, RheaConfig(n_mem=2, base_model=str(tmp_path / "base"))).save_pretrained(tmp_path / "a")
    base = ["--data", str(data), "--adapters", str(tmp_path / "a")]
    assert bench.main(base + ["--text-tokens", "4", "--piece-tokens", "2", "--out", str(tmp_path / "r")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    seg = report["results"][str(tmp_path / "a")]["segments"]
    assert list(seg) == list(bench.LAYOUTS) and report["meta"]["n_replies"] >= 2
    assert (tmp_path / "r.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        bench.main(base + ["--text-tokens", "4", "--piece-tokens", "4"])
    assert "at least two pieces" in capsys.readouterr().err
    assert bench.main(["--data", str(data), "--adapters", str(tmp_path)]) == 2
    assert "not a save_pretrained directory" in capsys.readouterr().err
