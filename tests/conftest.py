import pytest


@pytest.fixture
def tiny_model():
    """A fresh tiny RheaForCausalLM (random Llama, 4 <mem> slots, non-zero LoRA)."""
    from rhea.testing import tiny_rhea

    return tiny_rhea()
