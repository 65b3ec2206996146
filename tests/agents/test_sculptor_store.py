"""AcmStore: fragment, fold, summarize, restore, search, undo, render, stats."""
from __future__ import annotations

import copy

import pytest

from rhea.agents.sculptor.errors import (
    FragmentOverlapError, FragmentStateError, InvalidMessagesError, MarkerNotFoundError,
    NothingToUndoError, UnknownFragmentError, UnknownSearchError,
)
from rhea.agents.sculptor.store import FOLDED, SUMMARIZED, VISIBLE, AcmStore


def test_untouched_store_renders_the_input_exactly(conversation):
    before = copy.deepcopy(conversation)
    store = AcmStore(conversation)
    assert store.render() == conversation
    assert conversation == before  # the input is never mutated
    s = store.stats()
    assert s["visible_chars"] == s["original_chars"] == sum(len(m["content"]) for m in conversation)
    assert s["original_tokens_approx"] == -(-s["original_chars"] // 4)


def test_fragment_covers_span_exactly_and_changes_nothing_visible(conversation):
    store = AcmStore(conversation)
    frags = store.fragment("<log>", "</log>", 4)
    content = conversation[1]["content"]
    start, end = content.index("<log>"), content.index("</log>") + len("</log>")
    assert [f.message_index for f in frags] == [1] * 4
    assert frags[0].start == start and frags[-1].end == end
    assert all(a.end == b.start for a, b in zip(frags, frags[1:]))
    assert "".join(content[f.start:f.end] for f in frags) == content[start:end]
    assert all(len(f.id) == 6 and f.state == VISIBLE for f in frags)
    assert len({f.id for f in frags}) == 4
    assert store.render() == conversation


def test_ids_are_deterministic_given_a_seed(conversation):
    ids = lambda seed: [f.id for f in AcmStore(conversation, seed=seed).fragment("<log>", "</log>", 5)]
    assert ids(7) == ids(7)
    assert ids(7) != ids(8)


def test_fold_then_restore_is_identity_and_keeps_message_structure(conversation):
    store = AcmStore(conversation)
    frags = store.fragment("<log>", "</log>", 3)
    folded = store.fold(frags[1].id)
    view = store.render()
    assert folded.state == FOLDED
    assert len(view) == len(conversation)
    assert [m["role"] for m in view] == [m["role"] for m in conversation]
    assert view[1]["name"] == "alice"
    assert f"[Folded fragment {frags[1].id}: {frags[1].chars:,} chars]" in view[1]["content"]
    assert conversation[1]["content"][frags[1].start:frags[1].end] not in view[1]["content"]
    assert view[0] == conversation[0] and view[2:] == conversation[2:]
    assert store.stats()["visible_chars"] < store.stats()["original_chars"]
    store.restore(frags[1].id)
    assert store.render() == conversation


def test_summarize_then_restore_is_identity(conversation):
    store = AcmStore(conversation)
    (frag,) = store.fragment("<log>", "</log>", 1)
    store.summarize(frag.id, "key_0=value_9, key_1=value_10, key_2=value_11", focus="latest values")
    content = store.render()[1]["content"]
    assert store.fragment_info(frag.id).state == SUMMARIZED
    assert f"Summary of fragment {frag.id}" in content and "focus: latest values" in content
    assert "key_2=value_11" in content and "update 0:" not in content
    store.restore(frag.id)
    assert store.render() == conversation


def test_fold_of_summarized_and_undo_walks_back_every_step(conversation):
    store = AcmStore(conversation)
    views = [store.render()]
    (frag,) = store.fragment("<log>", "</log>", 1)
    views.append(store.render())
    store.summarize(frag.id, "short", focus="f")
    views.append(store.render())
    store.fold(frag.id)
    views.append(store.render())
    store.search("budget")
    assert [op.kind for op in store.op_log] == ["fragment", "summarize", "fold", "search"]
    assert [op.changes_view for op in store.op_log] == [False, True, True, False]
    assert store.undo().kind == "search"
    for expected in reversed(views[:-1]):
        store.undo()
        assert store.render() == expected
    assert store.fragments == {} and store.op_log == ()
    with pytest.raises(NothingToUndoError):
        store.undo()


def test_fragment_errors_name_the_problem(conversation):
    store = AcmStore(conversation)
    with pytest.raises(MarkerNotFoundError, match="start_marker '<nope>'"):
        store.fragment("<nope>", "</log>", 2)
    with pytest.raises(MarkerNotFoundError, match="end_marker '<log>' not found after"):
        store.fragment("</log>", "<log>", 2)
    with pytest.raises(MarkerNotFoundError, match="any 'assistant' message"):
        store.fragment("<log>", "</log>", 2, role="assistant")
    frags = store.fragment("<log>", "</log>", 2)
    with pytest.raises(FragmentOverlapError, match=frags[0].id):
        store.fragment("update 0", "update 1", 1)
    with pytest.raises(FragmentStateError, match="cannot be split"):
        store.fragment("Budget", "42", 20)


def test_state_errors(conversation):
    store = AcmStore(conversation)
    (frag,) = store.fragment("Budget", "EUR.", 1)
    with pytest.raises(FragmentStateError, match="already visible"):
        store.restore(frag.id)
    store.fold(frag.id)
    with pytest.raises(FragmentStateError, match="already folded"):
        store.fold(frag.id)
    with pytest.raises(UnknownFragmentError, match=frag.id):  # the message lists known ids
        store.fold("zzzzzz")


def test_search_is_case_insensitive_over_original_content(conversation):
    store = AcmStore(conversation)
    (frag,) = store.fragment("Budget", "EUR.", 1)
    store.fold(frag.id)
    record = store.search("BUDGET", role="user", max_results=10, context_size=5)
    content = conversation[3]["content"]
    assert record.total_matches == 2
    assert [m.start for m in record.matches] == [content.index("Budget"), content.index("budget")]
    assert record.matches[0].fragment_id == frag.id and record.matches[0].fragment_state == FOLDED
    assert record.matches[1].fragment_id is None
    assert store.snippet(record.matches[0], 5) == "…lso: Budget is 4…"
    capped = store.search("key_", role="all", max_results=3)
    assert capped.total_matches == 13 and len(capped.matches) == 3  # 12 log lines + the assistant reply
    assert store.search("key_", role="assistant").total_matches == 1
    assert store.search_record(record.id) is record
    with pytest.raises(UnknownSearchError, match=record.id):
        store.search_record("nosuch")


@pytest.mark.parametrize("bad", ["text", [{"role": "user"}], [{"role": "", "content": "x"}],
                                 [{"role": "user", "content": None}], [("user", "x")]])
def test_bad_messages_raise_named_error(bad):
    with pytest.raises(InvalidMessagesError):
        AcmStore(bad)
