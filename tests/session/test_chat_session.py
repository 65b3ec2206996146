import pytest
import torch

from rhea.session import ChatSession, SessionError

POLICIES = ["vanilla", "recent-k", "bm25", "summary", "reply-soft-compress", "rhea", "rhea-no-im", "rhea-all-raw", "rhea-drop-all"]
SCRIPT = ["what is the capital of france ?", "from now on always answer in french .", "what color is the cat ?"]


@pytest.mark.parametrize("policy", POLICIES)
def test_session_turns_save_load_exact(tiny_model, tmp_path, policy):
    chat = ChatSession(tiny_model, policy=policy, max_new_tokens=4)
    for q in SCRIPT:
        reply = chat.send(q)
        assert isinstance(reply, str)
    assert len(chat.conversation) == 3 and len(chat.records) == 3
    rec = chat.records[-1]
    assert sum(rec.tiers.values()) == 2 and rec.prompt_tokens > 0
    assert {"plan_s", "prefill_s", "decode_s", "render_s"} <= set(rec.timings)
    chat.save(tmp_path / "s")
    back = ChatSession.load(tmp_path / "s", tiny_model)
    assert back.conversation == chat.conversation and back.policy.name == policy
    assert back.records == chat.records
    state_a, state_b = chat.policy.state_dict(), back.policy.state_dict()
    if policy.startswith("rhea") or policy == "reply-soft-compress":
        la, lb = state_a["state"]["episodic"]["latents"], state_b["state"]["episodic"]["latents"]
        assert (la is None and lb is None) or torch.equal(la, lb)
        assert state_a["state"]["im"] == state_b["state"]["im"]
    assert chat.send("what is the weather ?") == back.send("what is the weather ?")
    assert chat.last_plan.to_dict() == back.last_plan.to_dict() if policy != "summary" else True


def test_stream_yields_the_reply(tiny_model):
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=6)
    pieces = list(chat.stream("what is the capital of france ?"))
    assert "".join(pieces).strip() == chat.conversation[-1].assistant


def test_rhea_uses_generate_adapter_and_baselines_the_base(tiny_model):
    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=3)
    chat.send("the cat")
    assert chat._adapter_for(chat.last_plan) == "base"
    chat.set_policy("rhea")
    chat.send("the dog")
    assert chat._adapter_for(chat.last_plan) == "generate" and len(chat.policy.episodic) == 2


def test_bad_messages(tiny_model, tmp_path):
    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=2)
    for bad in ["", "   \n\t"]:
        with pytest.raises(ValueError, match="empty|blank|whitespace"):
            chat.send(bad)
    with pytest.raises(ValueError, match="split it"):
        chat.send("x" * 300_000)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        chat.send(b"\xff\xfe bytes")
    with pytest.raises(ValueError, match="must be a str"):
        chat.send(12)
    with pytest.raises(TypeError, match="RheaForCausalLM"):
        ChatSession(object())
    with pytest.raises(ValueError, match="unknown policy"):
        ChatSession(tiny_model, policy="nope")
    assert len(chat.conversation) == 0  # nothing recorded from the rejected messages


def test_plan_over_context_window_is_a_clear_error(tiny_model):
    from rhea.context import ContextOverflowError

    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=2)
    with pytest.raises(ContextOverflowError, match="exceeds the model's context"):
        chat.send(" ".join(["cat"] * 600))  # tiny model window: 512


def test_load_errors(tiny_model, tmp_path):
    with pytest.raises(SessionError, match="not a saved session"):
        ChatSession.load(tmp_path, tiny_model)
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=2)
    chat.send("the cat")
    chat.save(tmp_path / "s")
    (tmp_path / "s" / "session.json").write_text("{broken")
    with pytest.raises(SessionError, match="corrupted"):
        ChatSession.load(tmp_path / "s", tiny_model)


def test_agent_policies_run_in_a_session(tiny_model):
    from rhea.backends.embedding import HashingEmbedder
    from rhea.backends.llm import ScriptedGenerator

    # Sculptor's loop answers while planning: the session uses that answer, no second generation
    chat = ChatSession(tiny_model, policy="sculptor",
                       policy_kwargs={"generator": ScriptedGenerator(["final one", "final two"])})
    assert chat.send("the cat ?") == "final one" and chat.send("the dog ?") == "final two"
    assert chat.records[-1].timings["decode_s"] == 0.0
    # Context-Agent with embeddings only (no controller LLM) answers through the model
    chat = ChatSession(tiny_model, policy="context-agent", max_new_tokens=3,
                       policy_kwargs={"generator": None, "embedder": HashingEmbedder(64)})
    chat.send("plan a trip to paris")
    chat.send("what is the weather ?")
    assert len(chat.conversation) == 2 and chat.last_plan.policy == "context-agent"
