"""A directory saved without a tokenizer copy rebuilds the very tokenizer it was saved with, from the base's."""
import json

import pytest
import torch

from rhea.constants import MEM_TOKEN
from rhea.errors import CheckpointError
from rhea.modeling import RheaForCausalLM
from rhea.modeling.checkpoint import TOKENIZER_CHANGES_NAME, TOKENIZER_DIR
from rhea.modeling.tokenizer_changes import tokenizer_changes, tokenizer_files
from rhea.modeling.zoo import load_base_model
from rhea.testing import save_tiny_base, tiny_tokenizer

CORPUS = [
    "the capital of france is paris .",
    f"remember {MEM_TOKEN}{MEM_TOKEN} the blue cat",
    "<|im_start|>user\nwhat color is the dog ?<|im_end|>\n<|im_start|>assistant\n",
    "<pad> <eos> <unk> words the tokenizer never saw: zebra quux",
    "a b c 1 2 3 ( ) [ ] { } - ; : ' \"",
    "",
]


def _model_on_a_saved_base(tmp_path):
    base_dir = save_tiny_base(tmp_path / "base")
    base, tok = load_base_model(base_dir)
    return RheaForCausalLM.from_base(base, tok)


def _ids(tokenizer):
    plain = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in CORPUS]
    split = [tokenizer(t, add_special_tokens=False, split_special_tokens=True)["input_ids"] for t in CORPUS]
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi <mem>"}, {"role": "assistant", "content": "yes"}],
                                         add_generation_prompt=True, tokenize=False)
    return plain, split, chat, tokenizer.get_vocab(), tokenizer.all_special_tokens, tokenizer.pad_token_id


def test_a_save_without_a_tokenizer_copy_loads_the_same_tokenizer(tmp_path):
    model = _model_on_a_saved_base(tmp_path)
    model.tokenizer.add_tokens(["<extra>"])  # anything a user added travels too
    model.save_pretrained(tmp_path / "full")
    model.save_pretrained(tmp_path / "small", tokenizer_copy=False)
    assert (tmp_path / "full" / TOKENIZER_DIR).is_dir() and not (tmp_path / "full" / TOKENIZER_CHANGES_NAME).exists()
    assert not (tmp_path / "small" / TOKENIZER_DIR).exists()
    record = json.loads((tmp_path / "small" / TOKENIZER_CHANGES_NAME).read_text())
    added = record["files"]["tokenizer.json"]["append_added_tokens"]
    assert [t["content"] for t in added] == [MEM_TOKEN, "<extra>"]
    assert "model" not in record["files"]["tokenizer.json"].get("set", {})  # the vocabulary stays with the base
    full = RheaForCausalLM.from_pretrained(tmp_path / "full")
    small = RheaForCausalLM.from_pretrained(tmp_path / "small")
    assert _ids(small.tokenizer) == _ids(full.tokenizer) == _ids(model.tokenizer)
    assert tokenizer_files(small.tokenizer) == tokenizer_files(model.tokenizer)  # file for file the saved one
    assert small.mem_token_id == full.mem_token_id == model.mem_token_id
    torch.testing.assert_close(small.mem_slot_embeds, full.mem_slot_embeds)


def test_a_changed_chat_template_and_setting_are_recorded(tmp_path):
    model = _model_on_a_saved_base(tmp_path)
    model.tokenizer.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    model.tokenizer.model_max_length = 123
    model.save_pretrained(tmp_path / "small", tokenizer_copy=False)
    loaded = RheaForCausalLM.from_pretrained(tmp_path / "small").tokenizer
    assert loaded.chat_template == model.tokenizer.chat_template
    assert loaded.model_max_length == 123
    assert _ids(loaded) == _ids(model.tokenizer)


def test_a_base_with_another_vocabulary_is_refused(tmp_path):
    model = _model_on_a_saved_base(tmp_path)
    model.save_pretrained(tmp_path / "small", tokenizer_copy=False)
    other = tiny_tokenizer(extra_words=["zebra"])  # one more word: every id after it moves
    other.save_pretrained(tmp_path / "base")
    with pytest.raises(CheckpointError, match="vocabulary has SHA-256"):
        RheaForCausalLM.from_pretrained(tmp_path / "small")


def test_a_save_without_a_tokenizer_copy_needs_a_named_base(tmp_path):
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    assert not model.config.base_model
    with pytest.raises(CheckpointError, match="records no base_model"):
        model.save_pretrained(tmp_path / "m", tokenizer_copy=False)
    assert not (tmp_path / "m").exists()


def test_the_record_of_an_unchanged_tokenizer_is_empty():
    tok = tiny_tokenizer()
    record = tokenizer_changes(tok, tiny_tokenizer())
    assert record["files"] == {} and record["removed_files"] == []
