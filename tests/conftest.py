import os

import pytest


def pytest_configure(config):
    # Under pytest-xdist every worker would start one intra-op thread per core: two workers on
    # two cores then oversubscribe them, and OpenMP's spin-waiting makes every test many times
    # slower. One thread per worker keeps the cores busy without fighting.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture
def tiny_model():
    """A fresh tiny RheaForCausalLM (random Llama, 4 <mem> slots, non-zero LoRA)."""
    from rhea.testing import tiny_rhea

    return tiny_rhea()
