"""scripts/stage_model.py on small fake GGUFs (registry records monkeypatched): split, status,
assemble, the named errors, and the install into the cache rhea.modeling.zoo reads."""
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from rhea.modeling import zoo as zoo_mod
from rhea.errors import CorruptModelFileError, UnknownModelError
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "stage_model.py"


@pytest.fixture(scope="module")
def stage():
    mod = load_script(_PATH)
    return mod


@pytest.fixture()
def split_model(tmp_path, monkeypatch):
    """A fake split-GGUF zoo entry whose assembled file sits in a temporary cache."""
    monkeypatch.setenv("RHEA_CACHE", str(tmp_path / "cache"))
    data = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(32001))  # 1,024,032 bytes
    source = zoo_mod.SplitGGUF(parts=(("fake-part1", "p1.bin"),), file_name="fake.gguf", size=len(data),
                               sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(zoo_mod.MODEL_ZOO, "fake-split", zoo_mod.ZooModel("fake-split", "test", source))
    source.assembled_path().parent.mkdir(parents=True)
    source.assembled_path().write_bytes(data)
    return data, source


def test_split_status_assemble_roundtrip(stage, split_model, tmp_path):
    data, source = split_model
    staged = tmp_path / "staged"
    m = stage.split("fake-split", staged, piece_mb=0.25)  # 262,144-byte pieces -> 4 pieces
    assert [p["size"] for p in m["pieces"]] == [262144, 262144, 262144, 237600]
    assert m["sha256"] == source.sha256 and m["recorded_in_zoo"] and "rhea.modeling.zoo record" in m["sha256_source"]
    assert b"".join((staged / p["name"]).read_bytes() for p in m["pieces"]) == data
    assert json.loads((staged / "manifest.json").read_text())["size"] == len(data)
    r = stage.status(staged)
    assert r["complete"] and r["next"] is None and r["bytes_present"] == len(data)
    source.assembled_path().unlink()  # as on the GPU machine: nothing in the cache yet
    out = stage.assemble(staged)
    assert out["gguf"] == str(source.assembled_path()) and out["converted"] is None
    assert source.assembled_path().read_bytes() == data
    # rhea.modeling.zoo now finds the GGUF in the cache without any part package installed
    assert source.gguf_path("fake-split") == source.assembled_path()


def test_status_reports_missing_and_corrupt_pieces(stage, split_model, tmp_path):
    staged = tmp_path / "staged"
    stage.split("fake-split", staged, piece_mb=0.25)
    (staged / "piece-001.bin").unlink()
    corrupt = bytearray((staged / "piece-002.bin").read_bytes())
    corrupt[10] ^= 1
    (staged / "piece-002.bin").write_bytes(bytes(corrupt))
    r = stage.status(staged)
    assert r["present"] == ["piece-000.bin", "piece-003.bin"] and r["missing"] == ["piece-001.bin"]
    assert r["corrupt"] == ["piece-002.bin"] and r["next"] == "piece-001.bin" and not r["complete"]
    assert stage.status(staged, hash_pieces=False)["corrupt"] == []  # --quick: sizes only
    with pytest.raises(stage.StagingError, match="send piece-001.bin next"):
        stage.assemble(staged, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_assemble_refuses_a_wrong_whole_file(stage, split_model, tmp_path):
    """Pieces consistent with a manifest that is not the zoo's record: a named error, nothing written."""
    staged = tmp_path / "staged"
    stage.split("fake-split", staged, piece_mb=0.25)
    manifest = json.loads((staged / "manifest.json").read_text())
    manifest["sha256"] = "0" * 64
    (staged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptModelFileError, match="split from another file"):
        stage.assemble(staged, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_assemble_checks_the_concatenation(stage, split_model, tmp_path, monkeypatch):
    """Pieces each matching the manifest but reassembling to another file (the manifest's whole-file
    hash is the zoo record): CorruptModelFileError, and no partial file left behind."""
    staged = tmp_path / "staged"
    stage.split("fake-split", staged, piece_mb=0.25)
    manifest = json.loads((staged / "manifest.json").read_text())
    manifest["pieces"][0], manifest["pieces"][1] = manifest["pieces"][1], manifest["pieces"][0]
    (staged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptModelFileError, match="Nothing was installed"):
        stage.assemble(staged, tmp_path / "out" / "x.gguf")
    assert list((tmp_path / "out").iterdir()) == []


def test_packaged_model_records_the_file_hash_and_converts(stage, tmp_path, monkeypatch):
    """A one-package model has no recorded hash: the manifest says where its hash came from, and
    assemble converts into the model cache (convert_to_cache, stubbed here) from the staged GGUF."""
    monkeypatch.setenv("RHEA_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(5000))
    monkeypatch.setitem(zoo_mod.MODEL_ZOO, "fake-packaged",
                        zoo_mod.ZooModel("fake-packaged", "test", zoo_mod.PackagedGGUF("no-such-dist")))
    m = stage.split("fake-packaged", tmp_path / "staged", piece_mb=0.001, from_file=str(gguf))
    assert len(m["pieces"]) == 5 and not m["recorded_in_zoo"] and "records no hash" in m["sha256_source"]
    seen = {}

    def fake_convert(zoo):
        seen["gguf"] = zoo.locate_gguf()
        seen["name"] = zoo.name
        return zoo.cache_path

    monkeypatch.setattr(zoo_mod, "convert_to_cache", fake_convert)
    out = stage.assemble(tmp_path / "staged")
    target = zoo_mod.cache_dir() / "gguf" / "tiny.gguf"
    assert out["gguf"] == str(target) and target.read_bytes() == gguf.read_bytes()
    assert seen == {"gguf": (str(target.parent), "tiny.gguf"), "name": "fake-packaged"}
    assert out["converted"] == str(zoo_mod.cache_dir() / "models" / "fake-packaged")


def test_bad_arguments_get_named_errors(stage, tmp_path, capsys):
    with pytest.raises(stage.StagingError, match="no manifest.json"):
        stage.status(tmp_path)
    with pytest.raises(UnknownModelError):
        stage.split("no-such-model", tmp_path / "s", 40)
    with pytest.raises(stage.StagingError, match="--piece-mb 100"):
        stage.split("smollm2-135m", tmp_path / "s", 100)
    assert stage.main(["status", "--staged", str(tmp_path)]) == 2
    assert "StagingError" in capsys.readouterr().err


def _git(repo, *args):
    import subprocess

    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_room_counts_what_a_device_call_sends(stage, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("/runs/\n")
    (repo / "tracked.bin").write_bytes(b"t" * 3000)
    _git(repo, "add", ".gitignore", "tracked.bin")
    (repo / "untracked.txt").write_bytes(b"u" * 500)            # travels: untracked, not ignored
    (repo / "runs").mkdir()
    (repo / "runs" / "big.bin").write_bytes(b"x" * 10_000)       # stays: ignored
    (repo / "shared").mkdir()
    (repo / "shared" / "data.txt").write_bytes(b"s" * 200)       # travels: the checkout's own shared/
    (repo / ".whl").mkdir()
    (repo / ".whl" / "w.whl").write_bytes(b"w" * 700)
    r = stage.room(repo)
    tree = 3000 + len("/runs/\n") + 500 + 200 + 700  # .whl is not ignored here, so it travels anyway
    assert r["tree_bytes"] == tree and r["carry_bytes"] == 0
    assert r["piece_bytes"] == stage.CALL_LIMIT_BYTES - tree - stage.MARGIN_BYTES
    (repo / ".gitignore").write_text("/runs/\n/.whl/\n")
    r = stage.room(repo, [Path(".whl")])
    assert r["carry_bytes"] == 700 and r["tree_bytes"] == tree - 700 + len("/.whl/\n")
    assert r["piece_bytes"] == stage.CALL_LIMIT_BYTES - r["tree_bytes"] - 700 - stage.MARGIN_BYTES
    with pytest.raises(stage.StagingError, match="no such path"):
        stage.room(repo, [Path("nowhere")])


def test_pieces_inside_the_checkout_must_be_ignored(stage, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    stage.check_ignored(repo, tmp_path / "elsewhere")              # outside the checkout: nothing to check
    with pytest.raises(stage.StagingError, match=r"echo /\.stage/ >> .*exclude"):
        stage.check_ignored(repo, repo / ".stage" / "m")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("/.stage/\n")
    stage.check_ignored(repo, repo / ".stage" / "m")


def test_piece_size_must_be_a_number_or_auto(stage, tmp_path, capsys):
    assert stage.main(["split", "smollm2-135m", "--out", str(tmp_path / "s"), "--piece-mb", "forty"]) == 2
    assert "a number of MiB or auto" in capsys.readouterr().err


def test_aside_shrinks_what_travels_and_back_restores_it(stage, tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("/.stage/\n")
    (repo / "code.py").write_bytes(b"c" * 100)
    (repo / "results").mkdir()
    (repo / "results" / "big.json").write_bytes(b"r" * 5000)
    (repo / "results" / "sub").mkdir()
    (repo / "results" / "sub" / "more.png").write_bytes(b"p" * 3000)
    _git(repo, "add", ".")
    git_status = lambda: subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],  # noqa: E731
                                        capture_output=True, text=True).stdout
    before, status_before = stage.room(repo), git_status()
    record = stage.aside(repo, ["results"])
    assert record["bytes"] == 8000 and [m["path"] for m in record["moved"]] == ["results"]
    after = stage.room(repo)
    assert after["tree_bytes"] == before["tree_bytes"] - 8000 and after["aside"] == ["results"]
    assert not (repo / "results").exists() and (repo / ".stage" / "aside" / "results" / "sub" / "more.png").is_file()
    with pytest.raises(stage.StagingError, match="already aside"):
        stage.aside(repo, ["results"])
    (repo / "results").mkdir()  # something new in its place: back refuses, naming it, and moves nothing
    with pytest.raises(stage.StagingError, match="exist"):
        stage.back(repo)
    (repo / "results").rmdir()
    stage.back(repo)
    assert (repo / "results" / "sub" / "more.png").read_bytes() == b"p" * 3000
    assert stage.room(repo) == before
    assert git_status() == status_before
    with pytest.raises(stage.StagingError, match="nothing is aside"):
        stage.back(repo)


def test_aside_refuses_paths_outside_the_checkout_and_an_unignored_store(stage, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("a")
    with pytest.raises(stage.StagingError, match=r"echo /\.stage/"):
        stage.aside(repo, ["a.txt"])  # .stage/ not ignored: what is aside would travel anyway
    (repo / ".gitignore").write_text("/.stage/\n")
    for bad in ("../x", "/etc", "missing"):
        with pytest.raises(stage.StagingError, match="not a path inside the checkout"):
            stage.aside(repo, [bad])
    assert (repo / "a.txt").exists() and not (repo / ".stage" / "aside" / "moved.json").exists()
