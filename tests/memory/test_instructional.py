import pytest

from rhea.context import EmptyMessageError
from rhea.memory import InstructionalMemory, infer_slots
from rhea.memory.instructional import HEADER


def test_add_keeps_order_and_renders_verbatim():
    im = InstructionalMemory()
    im.add("Always end with 'Over and out.'", turn=0)
    im.add("Never use commas in your replies.", turn=2)
    assert im.render() == HEADER + "\n- Always end with 'Over and out.'\n- Never use commas in your replies."
    assert [e.turn for e in im.entries] == [0, 2] and im.version == 2


def test_duplicate_does_not_change_version():
    im = InstructionalMemory()
    im.add("From now on, respond in French.", turn=0)
    before = (im.render(), im.version)
    again = im.add("  from now on, respond in French  ", turn=4)
    assert (im.render(), im.version) == before and again.turn == 0
    assert im.history[-1].action == "duplicate" and "entry 0" in im.history[-1].reason


def test_conflicting_language_and_length_replace_with_reasons():
    im = InstructionalMemory()
    im.add("From now on, respond in French.", turn=0)
    im.add("Keep all your answers under 50 words.", turn=1)
    im.add("Respond in English from here on.", turn=2)
    im.add("Limit every reply to 3 sentences.", turn=3)
    assert [e.text for e in im.entries] == ["Respond in English from here on.", "Limit every reply to 3 sentences."]
    replaced = [h for h in im.history if h.action == "replace"]
    assert [h.text for h in replaced] == ["From now on, respond in French.", "Keep all your answers under 50 words."]
    assert "language" in replaced[0].reason and "replaces" in replaced[0].reason
    assert replaced[1].by_id == im.entries[1].id


def test_unknown_slots_and_partial_overlap_keep_both():
    im = InstructionalMemory()
    im.add("Mention the word 'banana' in each response.", turn=0)
    im.add("Include a relevant quote in all your answers.", turn=1)
    assert len(im) == 2
    im2 = InstructionalMemory()
    im2.add("Answer in French using bullet points.", turn=0)
    im2.add("Answer in German from now on.", turn=1)
    assert len(im2) == 2 and im2.history[-2].action == "conflict-kept"


@pytest.mark.parametrize("instruction,revocation", [
    ("From now on, open every response with the letter O.", "Stop starting with O."),
    ("Reply in valid JSON from now on.", "Forget the JSON rule."),
    ("Do not use any commas in your answers.", "Feel free to use commas again."),
    ("Include an emoji in each of your replies.", "No need to include emojis anymore."),
    ("Cite a source in every answer.", "You don't have to cite a source anymore."),
])
def test_revocation_removes_the_matching_entry(instruction, revocation):
    im = InstructionalMemory()
    im.add("Call me Sam from now on.", turn=0)
    im.add(instruction, turn=1)
    v = im.version
    gone = im.revoke(revocation, reason="user revoked", turn=5)
    assert [e.text for e in gone] == [instruction]
    assert [e.text for e in im.entries] == ["Call me Sam from now on."]
    assert im.version == v + 1
    assert im.history[-1].action == "revoke" and "user revoked" in im.history[-1].reason


def test_revoke_all_by_id_and_unmatched():
    im = InstructionalMemory()
    a = im.add("Always answer in haiku.", turn=0)
    im.add("Sign off every message with '- Bot'.", turn=1)
    assert [e.id for e in im.revoke(a.id, reason="by id")] == [a.id]
    v = im.version
    assert im.revoke("Stop talking about the weather.", reason="nothing") == []
    assert im.version == v and im.history[-1].action == "revoke-unmatched"
    im.revoke("Forget all previous instructions.", reason="reset")
    assert len(im) == 0 and im.render() == ""
    with pytest.raises(ValueError, match="live ids"):
        im.revoke(99, reason="x")


def test_round_trip_and_bad_inputs():
    im = InstructionalMemory()
    im.add("From now on, respond in French.", turn=0)
    im.add("Respond in English.", turn=1)
    again = InstructionalMemory.from_dict(im.to_dict())
    assert again.to_dict() == im.to_dict() and again.render() == im.render()
    again.add("Be sarcastic in every reply.", turn=2)
    assert again.entries[-1].id == 2  # ids continue after a reload, never reused
    with pytest.raises(EmptyMessageError):
        im.add("   ", turn=0)
    with pytest.raises(ValueError, match="turn"):
        im.add("Be brief.", turn=-1)
    with pytest.raises(ValueError, match="to_dict"):
        InstructionalMemory.from_dict({"entries": []})


def test_slot_inference():
    assert infer_slots("Write everything in lowercase.") == ("case",)
    assert infer_slots("End every response with 'Hope this helps!'.") == ("end",)
    assert infer_slots("Mention bananas.") == ()


def test_update_applies_recognizer_decisions():
    from rhea.memory import InstructionRecognizer

    rec, im = InstructionRecognizer(None), InstructionalMemory()
    for turn, msg in enumerate([
        "From now on, open every response with the letter O.",
        "What is the capital of Peru?",
        "Stop starting with O.",
    ]):
        im.update(msg, rec(msg), turn)
    assert len(im) == 0 and [h.action for h in im.history] == ["add", "revoke"]
    events = im.update("Stop using em dashes in your replies.", rec("Stop using em dashes in your replies."), 3)
    assert [e.action for e in events] == ["revoke-unmatched", "add"] and "standing instruction" in events[-1].reason


@pytest.mark.parametrize("message,kept", [
    ("Forget the Captain thing and call me Alex instead.", True),
    ("Forget the JSON rule, use YAML.", True),
    ("Forget the Captain thing.", False),
    ("You no longer need to call me 'Captain, and use my name'.", False),  # quoted text names no replacement
    ("You no longer need to call me ‘Captain, and use my name’.", False),  # typographic quotes too
])
def test_revocation_with_a_replacement_keeps_the_replacement(message, kept):
    from rhea.memory import InstructionRecognizer

    im, rec = InstructionalMemory(), InstructionRecognizer(None)
    for i, m in enumerate(["Call me Captain in all your replies.", "From now on, answer in JSON."]):
        im.update(m, rec(m), i)
    decision = rec(message)
    assert decision.kind == "revoke"
    actions = [e.action for e in im.update(message, decision, 2)]
    assert actions == (["revoke", "add"] if kept else ["revoke"])
    assert (message in [e.text for e in im.entries]) == kept and len(im) == (2 if kept else 1)


# The instruction-retention suite's own first turn: three instructions in one message.
THREE = ("From now on, answer with one of the following options: 'My answer is yes.', 'My answer is no.', "
         "'My answer is maybe.' From now on, include the keywords 'balance', 'practice' in every response. "
         "From now on, do not include the words 'thing', 'stuff' in any response.")


def test_a_message_with_several_instructions_is_stored_one_entry_each():
    from rhea.memory import InstructionRecognizer
    from rhea.memory.instructional import split_directives

    parts = split_directives(THREE)
    assert len(parts) == 3 and " ".join(parts) == THREE  # verbatim slices, nothing lost
    assert parts[0].endswith("'My answer is maybe.'")  # periods inside quotes do not split
    im, rec = InstructionalMemory(), InstructionRecognizer(None)
    im.update(THREE, rec(THREE), 0)
    assert [e.text for e in im.entries] == parts
    # Revoking one removes that one only (it used to remove the whole message, all three).
    revoke = "You no longer need to answer with those fixed options."
    events = im.update(revoke, rec(revoke), 10)
    assert [e.action for e in events] == ["revoke"] and events[0].text == parts[0]
    assert [e.text for e in im.entries] == parts[1:]


@pytest.mark.parametrize("message,n", [
    ("I'm in Lisbon. From now on, answer in Portuguese.", 1),  # context stays with its instruction
    ("From now on, answer in JSON. Use the key 'answer'.", 1),  # an uncued sentence elaborates the one before
    ("What is 2+2?", 1),
    ("Hi! From now on, reply in French. Always end with 'Bye!' Thanks.", 2),
])
def test_split_keeps_context_with_its_instruction(message, n):
    from rhea.memory.instructional import split_directives

    parts = split_directives(message)
    assert len(parts) == n and " ".join(parts) == message.strip()


def test_split_masks_the_recognizers_quoted_spans_typographic_ones_included():
    from rhea.memory.instructional import split_directives

    message = "From now on, end every reply with ‘That is all. Bye.’ From now on, keep it under 50 words."
    assert split_directives(message) == ["From now on, end every reply with ‘That is all. Bye.’",
                                         "From now on, keep it under 50 words."]


def test_entries_keep_provenance_and_survive_save_load():
    from rhea.memory import InstructionRecognizer

    im, rec = InstructionalMemory(), InstructionRecognizer(None)
    msg = "Hi! From now on, reply in French. Always end with 'Bye!' Thanks."
    im.update(msg, rec(msg), 3)
    assert [(e.turn, e.scope, e.source_message) for e in im.entries] == [(3, "standing", msg)] * 2
    assert im.entries[0].text != msg  # the part, while source_message keeps the whole message
    again = InstructionalMemory.from_dict(im.to_dict())
    assert again.to_dict() == im.to_dict() and again.entries[1].source_message == msg
    # a session saved before these fields existed still loads
    old = im.to_dict()
    for e in old["entries"]:
        del e["source_message"], e["scope"]
    legacy = InstructionalMemory.from_dict(old)
    assert [(e.source_message, e.scope) for e in legacy.entries] == [(e.text, "standing") for e in legacy.entries]


def test_one_off_request_never_replaces_a_standing_rule():
    from rhea.memory import InstructionRecognizer

    im, rec = InstructionalMemory(), InstructionRecognizer(lambda t: 1.0)  # a stage 2 that says "global" to all
    im.update("From now on, answer in French.", rec("From now on, answer in French."), 0)
    for turn, msg in enumerate(["Just this once, answer in English.", "Rewrite your previous answer in English.",
                                "For this question only, respond in German."], start=1):
        d = rec(msg)
        assert d.scope == "one-off" and not d.is_global
        events = im.update(msg, d, turn)
        assert [e.action for e in events] == ["one-off-ignored"]
    assert [e.text for e in im.entries] == ["From now on, answer in French."] and im.version == 1
    assert im.update("What is 2+2?", InstructionRecognizer(None)("What is 2+2?"), 5) == []
    with pytest.raises(ValueError, match="one-off"):
        im.add("Answer in English.", turn=6, scope="one-off")
