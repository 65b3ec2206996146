"""AcmStore.state_dict / from_state_dict: a saved store resumes exactly."""
from __future__ import annotations

import json

import pytest

from rhea.agents.sculptor import AcmStore
from rhea.agents.sculptor.state import StoreStateError


def sculpted_store(conversation):
    store = AcmStore(conversation, seed=3)
    store.search("key_1", role="all")
    ids = [f.id for f in store.fragment("<log>", "</log>", 3)]
    store.fold(ids[0])
    store.summarize(ids[1], "key_1 = value_10", "latest key_1")
    store.extend([{"role": "assistant", "content": "value_10"}])
    return store


def test_round_trip_through_json_renders_undoes_and_issues_ids_the_same(conversation):
    store = sculpted_store(conversation)
    loaded = AcmStore.from_state_dict(json.loads(json.dumps(store.state_dict())))
    assert loaded.render() == store.render() and loaded.original == store.original
    assert loaded.op_log == store.op_log and loaded.fragments == store.fragments
    assert loaded.stats() == store.stats()
    assert loaded.search("value").id == store.search("value").id  # same next id
    while store.op_log:
        assert loaded.undo() == store.undo()
        assert loaded.render() == store.render()
    assert loaded.render() == conversation


def test_bad_states_name_the_problem(conversation):
    state = sculpted_store(conversation).state_dict()
    with pytest.raises(StoreStateError, match="version 7 is not 1"):
        AcmStore.from_state_dict({**state, "version": 7})
    with pytest.raises(StoreStateError, match="malformed .*KeyError.*fragments"):
        AcmStore.from_state_dict({k: v for k, v in state.items() if k != "fragments"})
    with pytest.raises(StoreStateError, match="must be a dict"):
        AcmStore.from_state_dict([1, 2])
