"""Every file `save_pretrained` writes has its SHA-256 recorded; `from_pretrained` refuses an altered one."""
import json

import pytest
import torch

from rhea.errors import CheckpointError, CorruptedCheckpointError
from rhea.modeling import RheaForCausalLM
from rhea.modeling.checkpoint import MANIFEST_NAME, MEM_WEIGHTS_NAME, check_checkpoint
from rhea.modeling.manifest import read_manifest, verify_manifest
from rhea.storage import file_digest
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def _saved(tmp_path):
    model = tiny_rhea(latent_injection="states")
    model.save_pretrained(tmp_path / "m")
    return model, tmp_path / "m"


def _flip_one_byte(path, offset=None):
    data = bytearray(path.read_bytes())
    offset = len(data) // 2 if offset is None else offset
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_the_manifest_lists_every_file_the_save_wrote(tmp_path):
    _, directory = _saved(tmp_path)
    files = read_manifest(directory)
    on_disk = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()} - {MANIFEST_NAME}
    assert set(files) == on_disk
    assert {"compress/adapter_model.safetensors", "generate/adapter_model.safetensors", MEM_WEIGHTS_NAME,
            "latent_injector.safetensors", "rhea_config.json", "README.md"} <= set(files)
    for rel, entry in files.items():
        assert entry["sha256"] == file_digest(directory / rel) and entry["bytes"] == (directory / rel).stat().st_size
    assert verify_manifest(directory) == len(files)


@pytest.mark.parametrize("name", ["compress/adapter_model.safetensors", "latent_injector.safetensors",
                                  MEM_WEIGHTS_NAME])
def test_a_flipped_byte_is_a_named_error_before_any_weight_is_read(tmp_path, monkeypatch, name):
    _, directory = _saved(tmp_path)
    # a byte inside the tensor data (past the safetensors header): the file still parses, its weights differ
    _flip_one_byte(directory / name, offset=(directory / name).stat().st_size - 5)
    from rhea.modeling import checkpoint

    def no_read(*args, **kwargs):
        raise AssertionError("a weight file was read before the digests were checked")

    monkeypatch.setattr(checkpoint, "_read_safetensors", no_read)
    monkeypatch.setattr(checkpoint, "load_adapters", no_read)
    with pytest.raises(CorruptedCheckpointError, match=f"{name}.*SHA-256.*re-install|{name}.*SHA-256") as e:
        RheaForCausalLM.from_pretrained(directory, base_model=tiny_llama(len(tiny_tokenizer())))
    assert isinstance(e.value, CheckpointError)
    assert "save / export the model again" in str(e.value)


def test_a_truncated_or_missing_file_is_named(tmp_path):
    _, directory = _saved(tmp_path)
    path = directory / "generate" / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CorruptedCheckpointError, match=r"generate/adapter_model.safetensors has \d+ bytes"):
        check_checkpoint(directory)
    path.unlink()
    with pytest.raises(CorruptedCheckpointError, match="listed in rhea_manifest.json but missing"):
        check_checkpoint(directory)


def test_a_directory_without_a_manifest_loads_unchecked(tmp_path):
    model, directory = _saved(tmp_path)
    (directory / MANIFEST_NAME).unlink()
    assert verify_manifest(directory) == 0
    loaded = RheaForCausalLM.from_pretrained(directory, base_model=tiny_llama(len(tiny_tokenizer())))
    torch.testing.assert_close(loaded.mem_slot_embeds, model.mem_slot_embeds)


def test_a_damaged_manifest_is_named(tmp_path):
    _, directory = _saved(tmp_path)
    (directory / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(CorruptedCheckpointError, match="rhea_manifest.json is unreadable"):
        check_checkpoint(directory)
    (directory / MANIFEST_NAME).write_text(json.dumps({"format": 1, "files": {"../x": {"sha256": "0"}}}))
    with pytest.raises(CorruptedCheckpointError, match="outside the directory"):
        check_checkpoint(directory)


def test_files_rewritten_in_place_by_rhea_keep_the_manifest_true(tmp_path):
    from rhea.modeling.card import write_model_card
    from rhea.modeling.config import RheaConfig
    from rhea.modeling.shrink import cast_safetensors

    _, directory = _saved(tmp_path)
    config = RheaConfig.load(directory)
    config.tau_low = 0.25
    config.save(directory)          # what `rhea calibrate` and the fidelity writers do
    write_model_card(directory)
    cast_safetensors(directory, torch.float16)
    assert verify_manifest(directory) == len(read_manifest(directory))
    (directory / "notes.txt").write_text("a user's file is not checked")
    assert RheaForCausalLM.from_pretrained(directory, base_model=tiny_llama(len(tiny_tokenizer()))).config.tau_low == 0.25
