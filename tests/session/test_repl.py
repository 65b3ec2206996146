from rhea.session import ChatSession
from rhea.session.repl import repl


def test_repl_commands_and_trace(tiny_model, tmp_path):
    out = []
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=3)
    lines = ["From now on, always answer in French.", "/im", "what is the cat ?", "/policy recent-k", "the dog ?",
             f"/save {tmp_path / 's'}", f"/load {tmp_path / 's'}", "/bogus", "   ", "/quit", "never reached"]
    chat = repl(chat, lines, write=out.append)
    text = "".join(out)
    assert "Always answer in French" in text or "always answer in French" in text
    assert "IM: From now on, always answer in French." in text
    assert "tokens fed" in text and "latency: plan" in text and "#0:" in text
    assert "prompt tokens from the last turn's cache" in text  # turn 2 reuses at least the IM block of turn 1
    assert "policy: recent-k" in text and "loaded 3 turns, policy recent-k" in text
    assert "unknown command /bogus" in text
    assert len(chat.conversation) == 3
    assert f"assistant> {chat.conversation[-1].assistant}" in text


def test_trace_says_whether_the_plan_was_kept(tiny_model):
    out = []
    chat = ChatSession(tiny_model, policy="rhea", max_new_tokens=2,
                       policy_kwargs={"scorer": "bm25", "recognizer": None, "replan_every": 3, "replan_top": 0})
    repl(chat, ["the cat is blue .", "the dog is red .", "what color is the cat ?", "/quit"], write=out.append)
    text = "".join(out)
    assert "plan: made now (first plan) from turn 0, re-planned every 3 turns" in text
    assert "plan: kept from turn 0, re-planned every 3 turns" in text
