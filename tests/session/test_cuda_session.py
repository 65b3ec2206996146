"""A whole conversation on a GPU: compress, score (Triton), assemble, generate, save and reload.

Skipped without CUDA (CI has no GPU). The same tiny model in fp32 (TF32 off) runs the same
script on the CPU and on the GPU; greedy replies and every turn's decisions must agree.
"""
import pytest
import torch

from rhea.session import ChatSession
from rhea.testing import tiny_rhea

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SCRIPT = [
    "from now on always answer in french .",
    "what is the capital of france ?",
    "the dog and the cat are blue",
    "what color is the cat ?",
    "stop answering in french .",
    "what is the weather ?",
]


#: the rhea policy on the HCR latent scorer (the Triton kernel's path on the GPU) with thresholds that make
#: the script use several tiers; the default fused scorer needs MiniLM and bm25s, which the GPU image lacks
RHEA_KW = {"policy_kwargs": {"scorer": "latent", "tier_mode": "threshold", "tau_low": 0.2, "tau_high": 0.6}}


def _kw(policy):
    if policy == "bm25":
        pytest.importorskip("bm25s")
    return RHEA_KW if policy == "rhea" else {}


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _run(model, policy, **kw):
    chat = ChatSession(model, policy=policy, max_new_tokens=6, **kw)
    replies = [chat.send(q) for q in SCRIPT]
    return chat, replies


@pytest.mark.parametrize("policy", ["rhea", "rhea-all-raw", "rhea-drop-all", "vanilla", "recent-k", "bm25",
                                    "reply-soft-compress"])
def test_session_on_cuda_matches_cpu(policy):
    kw = _kw(policy)
    cpu_chat, cpu_replies = _run(tiny_rhea(), policy, **kw)
    gpu_chat, gpu_replies = _run(tiny_rhea().to("cuda"), policy, **kw)
    assert gpu_replies == cpu_replies
    for a, b in zip(cpu_chat.records, gpu_chat.records):
        assert (a.prompt_tokens, a.latent_slots, a.tiers) == (b.prompt_tokens, b.latent_slots, b.tiers)
    if policy == "rhea":
        # the thresholds were chosen so the script exercises all three tiers, scored by the Triton kernel
        kinds = {k for r in gpu_chat.records for k, n in r.tiers.items() if n}
        assert len(kinds) >= 2, [r.tiers for r in gpu_chat.records]


def test_cuda_session_saves_and_reloads_on_cpu(tmp_path):
    chat, _ = _run(tiny_rhea().to("cuda"), "rhea", **RHEA_KW)
    chat.save(tmp_path / "s")
    cpu_model = tiny_rhea()
    back = ChatSession.load(tmp_path / "s", cpu_model)
    assert [r.prompt_tokens for r in back.records] == [r.prompt_tokens for r in chat.records]
    reply = back.send("what is the capital of france ?")
    assert isinstance(reply, str)


def test_bf16_session_on_cuda_runs_every_turn():
    model = tiny_rhea().to("cuda", torch.bfloat16)
    chat, replies = _run(model, "rhea", **RHEA_KW)
    assert len(replies) == len(SCRIPT) and all(isinstance(r, str) for r in replies)
    assert all(r.timings["prefill_s"] > 0 for r in chat.records)


@pytest.mark.parametrize("policy", ["rhea", "reply-soft-compress"])
def test_cuda_session_resumes_on_cuda(tmp_path, policy):
    """A session saved from the GPU reloads with its latents on the CPU and goes on on the GPU,
    mixing restored and new latents in one prompt (what `rhea bench` does when it resumes)."""
    kw = _kw(policy)
    model = tiny_rhea().to("cuda")
    chat = ChatSession(model, policy=policy, max_new_tokens=6, **kw)
    for q in SCRIPT[:3]:
        chat.send(q)
    chat.save(tmp_path / "s")
    back = ChatSession.load(tmp_path / "s", model, **kw)
    for q in SCRIPT[3:]:
        assert isinstance(back.send(q), str)
    if policy == "reply-soft-compress":
        assert back.records[-1].latent_slots > 0
