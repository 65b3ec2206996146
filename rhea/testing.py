"""Tiny, offline, deterministic models for tests and examples (no downloads).

>>> tok = tiny_tokenizer(); base = tiny_llama(len(tok))
>>> base.config.hidden_size
32
"""
from __future__ import annotations

import torch

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_WORDS = (
    "the a an is are was of to in on at and or not it this that what which who how why when where "
    "please answer reply respond always never from now on json english french short long question "
    "paris france capital city weather cat dog blue red green one two three four five yes no "
    "user assistant system summary fact value key name color number said told remember forget"
).split()


def tiny_tokenizer(extra_words: list[str] | None = None):
    """A word-level fast tokenizer with a ChatML chat template, `<pad>`/`<eos>`/`<unk>` and chat specials."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<unk>", "<|im_start|>", "<|im_end|>"]
    words = specials + sorted(set(_WORDS + list("abcdefghijklmnopqrstuvwxyz0123456789") + list(".,?!:;'\"()[]{}-") + (extra_words or [])))
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML_TEMPLATE
    return tok


def tiny_llama(vocab_size: int, *, hidden_size: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               max_positions: int = 512, seed: int = 0):
    """A randomly initialised Llama; the same seed gives the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_rhea(n_mem: int = 4, seed: int = 0, **config_kwargs):
    """A `RheaForCausalLM` on a tiny Llama, LoRA B matrices (and a ``"deep"`` injector's per-layer
    up matrices) randomised so adapters are not no-ops."""
    from rhea.modeling import RheaConfig, RheaForCausalLM

    tok = tiny_tokenizer()
    base = tiny_llama(len(tok), seed=seed)
    config_kwargs = {"lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, **config_kwargs}
    model = RheaForCausalLM.from_base(base, tok, RheaConfig(n_mem=n_mem, **config_kwargs))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
        if model.latent_injector is not None and model.latent_injector.layer_up is not None:
            up = model.latent_injector.layer_up
            up.copy_(torch.randn(up.shape, generator=gen) * 0.5)
    return model.eval()


def save_tiny_base(directory) -> str:
    """Save a tiny base model and its tokenizer to `directory` (what `load_base_model(path)` reads), for a Rhea
    directory whose ``base_model`` must name a loadable base; returns the path as a string."""
    tok = tiny_tokenizer()
    tiny_llama(len(tok)).save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


class WindowedGenerator:
    """A `TextGenerator` test double with a context window: it refuses (`AssertionError`) any prompt
    that, rendered with its tokenizer's chat template, leaves less than ``max_new_tokens`` of the
    window, so a test that runs an agent through it proves the agent's inner prompts fit. Replies
    cycle through `replies`; `longest` is the longest prompt it was given (in tokens), `last` the
    last prompt, `calls` the calls.

    >>> gen = WindowedGenerator(["ok"], window=64)
    >>> gen.generate([{"role": "user", "content": "hi"}], max_new_tokens=8), gen.calls
    ('ok', 1)
    >>> gen.generate([{"role": "user", "content": "the cat " * 40}], max_new_tokens=8)
    Traceback (most recent call last):
    ...
    AssertionError: a prompt of 85 tokens with max_new_tokens=8 overruns the 64-token window
    """

    def __init__(self, replies, *, window: int = 512, tokenizer=None):
        self.replies = [replies] if isinstance(replies, str) else list(replies)
        self.window = int(window)
        self.tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
        self.calls = self.longest = 0
        self.last = None  # the last prompt given

    def count_prompt_tokens(self, messages) -> int:
        from rhea.backends.chat_template import apply_chat_template

        text = apply_chat_template(self.tokenizer, [{"role": m["role"], "content": m["content"]} for m in messages])
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None, **kwargs) -> str:
        n = self.count_prompt_tokens(messages)
        if n + max_new_tokens > self.window:
            raise AssertionError(f"a prompt of {n} tokens with max_new_tokens={max_new_tokens} overruns the "
                                 f"{self.window}-token window")
        self.longest, self.last = max(self.longest, n), messages
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        return reply
