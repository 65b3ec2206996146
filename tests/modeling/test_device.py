"""`--device` / `resolve_device`: auto picks a GPU only when torch sees one; bad devices are named errors."""
import pytest
import torch

from rhea.cli import main
from rhea.errors import DeviceError
from rhea.memory.episodic import EpisodicMemory
from rhea.context.conversation import Turn
from rhea.modeling.loading import resolve_device
from rhea.testing import tiny_rhea

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")


def test_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    want = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == want and resolve_device(None) == want


@no_gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_a_named_error(device):
    with pytest.raises(DeviceError, match=r"torch.cuda.is_available\(\) is False.*--device cpu"):
        resolve_device(device)


@pytest.mark.parametrize("device, match", [("gpu0", "not a torch device"), ("meta", "'cpu' or 'cuda'"),
                                           ("cuda:99", "CUDA device")])
def test_bad_devices(device, match):
    if device == "cuda:99" and not torch.cuda.is_available():
        match = "is_available"
    with pytest.raises(DeviceError, match=match):
        resolve_device(device)


@no_gpu
def test_cli_refuses_cuda_before_loading_anything(capsys, monkeypatch):
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "_load_rhea_model", lambda *a: pytest.fail("loaded a model for a bad device"))
    assert main(["bench", "--suite", "efficiency", "--policies", "vanilla", "--out", "unused", "--device", "cuda"]) == 1
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_episodic_scores_entries_loaded_from_disk_with_new_ones():
    """Entries restored from a saved session (CPU tensors) and fresh ones score together."""
    model = tiny_rhea()
    mem = EpisodicMemory(model.compress)
    mem.extend([Turn("a", "the cat is blue"), Turn("b", "paris is the capital of france")])
    want = mem.score("what color is the cat ?")
    back = EpisodicMemory(model.compress)
    back.load_state_dict(mem.state_dict())
    assert all(e.latents.device.type == "cpu" for e in back.entries)
    assert torch.allclose(back.score("what color is the cat ?"), want)
    back.append(Turn("c", "the dog is red"))
    assert back.score("what color is the cat ?").shape == (3,)
