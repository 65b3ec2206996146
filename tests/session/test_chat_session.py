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
        assert reply == chat.conversation[-1].assistant and chat.records[-1].policy == policy
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
    if policy == "summary":  # the running summary itself comes back, not only the turns
        assert state_b["state"]["summary"] == state_a["state"]["summary"] and state_a["state"]["updates"] == 3
    assert chat.send("what is the weather ?") == back.send("what is the weather ?")
    assert chat.last_plan.to_dict() == back.last_plan.to_dict()


def test_observers_see_every_turn_with_its_record_and_plan(tiny_model):
    chat = ChatSession(tiny_model, policy="recent-k", max_new_tokens=3)
    traces = []
    observer = chat.add_observer(traces.append)
    chat.send("the cat")
    chat.send("the dog")
    assert [t.record for t in traces] == chat.records
    assert traces[-1].plan is chat.last_plan and traces[-1].generation is chat.last_generation
    assert traces[-1].turn == chat.conversation[-1] and traces[-1].turn.user == "the dog"
    chat.remove_observer(observer)
    chat.send("the bird")
    assert len(traces) == 2
    with pytest.raises(TypeError, match="callable"):
        chat.add_observer("not a function")


def test_rhea_counters_split_compress_work_between_planning_and_observing(tiny_model):
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=2, policy_kwargs={"scorer": "latent"})  # latents scored
    chat.send("the cat sat on the mat")
    first = chat.records[-1].timings
    assert first["plan_compress_calls"] == 0 and first["compress_calls"] == 1  # nothing to score yet; the reply
    chat.send("where did the cat sit ?")
    t = chat.records[-1].timings
    assert t["plan_compress_calls"] == 1 and t["compress_calls"] == 2  # the query while planning, then the reply
    assert 0 < t["plan_compress_s"] <= t["compress_s"] and t["plan_compress_s"] <= t["plan_s"]
    vanilla = ChatSession(tiny_model, policy="vanilla", max_new_tokens=2)
    vanilla.send("the cat")
    assert not any(k.startswith(("compress", "plan_compress")) for k in vanilla.records[-1].timings)


def test_policies_describe_how_a_session_runs_them(tiny_model):
    from rhea.policies import ContextPolicy, policy_class, register_policy
    from rhea.policies.assemble import assemble_plan

    assert policy_class("rhea").adapter == "generate" and policy_class("rhea").model_arg == "model"
    assert policy_class("vanilla").adapter == "base" and policy_class("summary").controller_arg == "generator"
    assert policy_class("rhea-no-im").thresholds == ("tau_low", "tau_high") and policy_class("bm25").thresholds == ()

    @register_policy("canned-doc-test")
    class Canned(ContextPolicy):
        adapter = "generate"

        def build(self, conversation, query):
            return assemble_plan(self.name, conversation, query, [], tokenizer=self.tokenizer)

        def planned_answer(self, plan):
            return "canned answer"

    try:
        chat = ChatSession(tiny_model, policy="canned-doc-test", max_new_tokens=3)
        assert chat._adapter_for(chat.policy.build(chat.conversation, "q")) == "generate"  # text only, yet generate
        assert chat.send("anything") == "canned answer"  # answered while planning: nothing generated
        assert chat.records[-1].timings["decode_s"] == 0.0 and chat.conversation[-1].assistant == "canned answer"
    finally:
        from rhea.policies import registry

        registry._POLICIES.pop("canned-doc-test", None)


def test_stream_yields_the_reply(tiny_model):
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=6)
    pieces = list(chat.stream("what is the capital of france ?"))
    assert "".join(pieces).strip() == chat.conversation[-1].assistant


def test_rhea_uses_generate_adapter_and_baselines_the_base(tiny_model):
    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=3)
    chat.send("the cat")
    assert chat._adapter_for(chat.last_plan) == "base"
    chat.set_policy("rhea", scorer="latent")  # a latent scorer: replies are compressed (caught up)
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
    from rhea.context import ContextOverflowError, ContextWindowError

    chat = ChatSession(tiny_model, policy="vanilla", max_new_tokens=2)
    with pytest.raises(ContextWindowError, match="Split the message into parts of at most 505 tokens") as e:
        chat.send(" ".join(["cat"] * 600))  # tiny model window: 512
    assert isinstance(e.value, ContextOverflowError) and len(chat.conversation) == 0


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
