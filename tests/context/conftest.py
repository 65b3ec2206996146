"""Shared fixtures: a tiny real fast tokenizer with a ChatML chat template, built in memory (no network)."""
from __future__ import annotations

import pytest

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rhea.constants import MEM_TOKEN

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

WORDS = (
    "system user assistant hi hello be brief answer in french what is the capital of france paris "
    "earlier and now tell me about cats dogs python code always never from on please thanks mem "
    "< > | _ im start end . , ? ! : ' \" 1 2 3 4 5"
).split()


def make_tokenizer(*, with_mem: bool = True, with_template: bool = True) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "[PAD]": 1}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|im_end|>")
    special = ["<|im_start|>", "<|im_end|>"] + ([MEM_TOKEN] if with_mem else [])
    tok.add_special_tokens({"additional_special_tokens": special})
    if with_template:
        tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="session")
def tokenizer_factory():
    """`make_tokenizer` itself, for tests that need a variant (no <mem>, no template)."""
    return make_tokenizer


@pytest.fixture(scope="session")
def tok():
    return make_tokenizer()
