"""`save_pretrained` is atomic: a failure part-way leaves the previous save as it was."""
import os

import pytest
import torch

from rhea.errors import CheckpointError
from rhea.modeling import RheaForCausalLM, checkpoint
from rhea.modeling.checkpoint import MEM_WEIGHTS_NAME, SAVED_ENTRIES
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME, ScoreHead
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def _snapshot(directory):
    """Every file under `directory` (relative path -> bytes)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _load(directory):
    return RheaForCausalLM.from_pretrained(directory, base_model=tiny_llama(len(tiny_tokenizer())))


@pytest.mark.parametrize("writer", ["tokenizer", "adapters", "card"])
def test_a_failure_mid_save_leaves_the_previous_save_intact(tmp_path, monkeypatch, writer):
    model = tiny_rhea()
    target = tmp_path / "m"
    model.save_pretrained(target)
    before = _snapshot(target)
    with torch.no_grad():
        model.mem_slot_embeds.add_(1.0)   # the next save would write other slots
    model.config.extra["note"] = "second save"

    def boom(*args, **kwargs):
        raise OSError("disk full")

    if writer == "tokenizer":
        monkeypatch.setattr(model.tokenizer, "save_pretrained", boom)
    elif writer == "adapters":
        monkeypatch.setattr(model.peft_model, "save_pretrained", boom)
    else:
        monkeypatch.setattr(checkpoint, "write_model_card", boom)
    with pytest.raises(OSError, match="disk full"):
        model.save_pretrained(target)
    assert _snapshot(target) == before                        # byte for byte the first save
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporary directory left behind
    loaded = _load(target)
    assert "note" not in loaded.config.extra
    torch.testing.assert_close(loaded.mem_slot_embeds, model.mem_slot_embeds - 1.0)


def test_a_failed_rename_puts_the_previous_save_back(tmp_path, monkeypatch):
    model = tiny_rhea()
    target = tmp_path / "m"
    model.save_pretrained(target)
    before = _snapshot(target)
    real = os.rename

    def rename(src, dst):
        if ".saving-" in str(src):
            raise OSError("rename refused")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="rename refused"):
        model.save_pretrained(target)
    assert _snapshot(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_save_cut_off_between_its_renames_says_where_the_previous_save_is(tmp_path):
    """A crash after the old directory was renamed aside and before the new one came in leaves no target."""
    tiny_rhea().save_pretrained(tmp_path / "m")
    (tmp_path / "m").rename(tmp_path / ".m.replaced-123-abcd")
    with pytest.raises(CheckpointError, match=r"previous save is intact at .*\.m\.replaced-123-abcd"):
        _load(tmp_path / "m")


def test_a_resave_replaces_the_saved_entries_and_keeps_the_users_files(tmp_path):
    model = tiny_rhea()
    target = tmp_path / "m"
    model.set_score_head(ScoreHead(model.hidden_size, 6, [0]))
    model.save_pretrained(target)
    assert (target / SCORE_HEAD_WEIGHTS_NAME).is_file()
    (target / "notes.txt").write_text("mine")
    (target / "logs").mkdir()
    (target / "logs" / "train.log").write_text("step 1")
    (target / "compress" / "stale.bin").write_bytes(b"from an older save")
    model.set_score_head(None)
    with torch.no_grad():
        model.mem_slot_embeds.add_(1.0)
    model.save_pretrained(target)
    assert (target / "notes.txt").read_text() == "mine"
    assert (target / "logs" / "train.log").read_text() == "step 1"
    assert not (target / SCORE_HEAD_WEIGHTS_NAME).exists()   # no head now: the old file would not be described
    assert not (target / "compress" / "stale.bin").exists()  # the adapter folders are written whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    torch.testing.assert_close(_load(target).mem_slot_embeds, model.mem_slot_embeds)
    assert {MEM_WEIGHTS_NAME, "compress", "generate"} <= SAVED_ENTRIES


def test_saving_onto_a_file_is_a_named_error(tmp_path):
    (tmp_path / "m").write_text("not a directory")
    with pytest.raises(CheckpointError, match="is a file"):
        tiny_rhea().save_pretrained(tmp_path / "m")
    assert (tmp_path / "m").read_text() == "not a directory"


def test_saving_onto_the_working_directory_is_a_named_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for directory in (".", tmp_path.parent):
        with pytest.raises(CheckpointError, match="working directory"):
            tiny_rhea().save_pretrained(directory)
    assert list(tmp_path.iterdir()) == []


def test_saving_through_a_symlink_replaces_the_directory_it_points_to(tmp_path):
    model = tiny_rhea()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    model.save_pretrained(tmp_path / "link")
    model.save_pretrained(tmp_path / "link")
    assert (tmp_path / "link").is_symlink()
    assert (tmp_path / "real" / MEM_WEIGHTS_NAME).is_file()
    torch.testing.assert_close(_load(tmp_path / "link").mem_slot_embeds, model.mem_slot_embeds)
