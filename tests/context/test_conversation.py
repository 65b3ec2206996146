import pytest

from rhea.context import Conversation, EmptyMessageError, InvalidTurnError, Turn


def test_json_round_trip_is_exact():
    conv = Conversation()
    conv.append(Turn("Hi ✓ — «quotes» \"and\" \\slashes\n", "Hello!", {"t": 1, "tags": ["a", "b"], "x": {"y": None}}))
    conv.append(Turn("Second?", "", {}))
    again = Conversation.from_json(conv.to_json())
    assert again == conv
    assert again.to_json() == conv.to_json()
    assert [t.meta for t in again] == [t.meta for t in conv]


def test_append_iterate_len_index_slice():
    conv = Conversation([Turn(f"q{i}", f"a{i}") for i in range(4)])
    assert len(conv) == 4
    assert [t.user for t in conv] == ["q0", "q1", "q2", "q3"]
    assert conv[-1].assistant == "a3"
    assert isinstance(conv[1:3], Conversation) and len(conv[1:3]) == 2


@pytest.mark.parametrize("user", ["", "   \n\t"])
def test_empty_user_message_is_rejected(user):
    with pytest.raises(EmptyMessageError, match="Turn.user"):
        Turn(user, "reply")


def test_bad_meta_and_types_are_rejected():
    with pytest.raises(InvalidTurnError, match="round trip"):
        Turn("q", "a", {"pair": (1, 2)})
    with pytest.raises(InvalidTurnError, match="JSON-serializable"):
        Turn("q", "a", {"obj": object()})
    with pytest.raises(InvalidTurnError, match="Turn"):
        Conversation().append({"user": "q", "assistant": "a"})
    with pytest.raises(InvalidTurnError, match="'turns'"):
        Conversation.from_json("[]")
