"""Vote parsing, majority, ties and abstentions."""
import pytest

from rhea.agents.ace import AceConfigError, parse_vote, tally


@pytest.mark.parametrize("reply, choice", [
    ("RETRIEVE", "RETRIEVE"), ("think", "THINK"), ("**Retrieve.**", "RETRIEVE"), ("Thinking is enough", "THINK"),
    ("We should retrieve more evidence", "RETRIEVE"), ("Both RETRIEVE and THINK work. Decision: THINK", "THINK"),
])
def test_parse_vote_reads_the_action(reply, choice):
    vote = parse_vote(reply)
    assert vote.choice == choice and vote.raw == reply


@pytest.mark.parametrize("reply, reason", [
    ("", "empty reply"), ("   ", "empty reply"), ("The milk is in the hallway", "names neither RETRIEVE nor THINK"),
    ("RETRIEVE or THINK", "names both RETRIEVE and THINK without a decision line"), (None, "empty reply"),
])
def test_unparseable_vote_abstains_with_reason(reply, reason):
    vote = parse_vote(reply)
    assert vote.choice is None and vote.reason == reason


def test_majority_wins_and_abstentions_are_counted():
    votes = [parse_vote(v) for v in ["THINK", "THINK", "RETRIEVE", "blah", "THINK"]]
    t = tally(votes)
    assert (t.action, t.tie, t.abstained, t.counts) == ("THINK", False, 1, {"RETRIEVE": 1, "THINK": 3})


def test_tie_goes_to_tie_break():
    votes = [parse_vote("THINK"), parse_vote("RETRIEVE")]
    assert tally(votes).action == "RETRIEVE" and tally(votes).tie
    assert tally(votes, tie_break="THINK").action == "THINK"


def test_all_abstained_is_a_tie():
    t = tally([parse_vote("?"), parse_vote("")])
    assert (t.action, t.tie, t.abstained) == ("RETRIEVE", True, 2)


def test_bad_tie_break_is_named():
    with pytest.raises(AceConfigError, match="tie_break='maybe'"):
        tally([], tie_break="maybe")
