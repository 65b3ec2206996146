"""Context-Agent's evaluation data and scores: TopiOCQA / NTM loaders, context tokens, F1, topic agreement."""
from __future__ import annotations

import json

import pytest

from rhea.agents.context_agent.evaluation import context_tokens, load_ntm, load_topiocqa, token_f1, topic_agreement
from rhea.errors import RheaError

CONV = """(line 1) user: what is catabolism?
(line 2) bot: It breaks down large molecules.
(line 3) user: which hormones are related to it?
(line 4) bot: Cortisol and glucagon.
(line 5) user: when was insulin discovered?
(line 6) bot: 1921."""


def memochat_row(conversation=CONV, answer=None, qid=2):
    answer = answer if answer is not None else [{"topic": "Catabolism", "start": 1, "end": 4},
                                                {"topic": "Insulin", "start": 5, "end": 6}]
    text = ("You will be shown a 6-line Task Conversation between user and bot.\n\n```\nTask Conversation:\n"
            f"{conversation}\n```\n\n```\nTask Introduction:\n...\n```\n\nTask Result:")
    return {"question_id": qid, "text": text, "answer": json.dumps(answer), "type": "writing_topiocqa"}


def write(tmp_path, rows):
    path = tmp_path / "topiocqa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_topiocqa_rows_become_episodes_with_gold_replies_and_topics(tmp_path):
    retrieval = {"question_id": 1, "text": "Query Sentence: ...", "answer": "2#4", "type": "retrieval_topiocqa"}
    (ep,) = load_topiocqa(write(tmp_path, [retrieval, memochat_row()]))
    assert ep["id"] == "topiocqa-2" and ep["source"] == "topiocqa"
    assert ep["user_turns"] == ["what is catabolism?", "which hormones are related to it?", "when was insulin discovered?"]
    assert ep["gold_replies"][-1] == "1921." and ep["topics"] == ["Catabolism", "Catabolism", "Insulin"]


@pytest.mark.parametrize("row, problem", [
    ({"question_id": 3, "text": "no block", "answer": "[]", "type": "writing_topiocqa"}, "not a MemoChat writing_topiocqa row"),
    (memochat_row(answer=[{"topic": "Catabolism", "start": 1, "end": 2}]), "line 3 lies in no gold topic segment"),
])
def test_malformed_topiocqa_rows_are_named(tmp_path, row, problem):
    with pytest.raises(RheaError, match=problem):
        load_topiocqa(write(tmp_path, [row]))


def test_a_file_without_conversations_or_missing_is_refused(tmp_path):
    with pytest.raises(RheaError, match="no writing_topiocqa rows"):
        load_topiocqa(write(tmp_path, [{"type": "retrieval_topiocqa"}]))
    with pytest.raises(RheaError, match="no such file"):
        load_topiocqa(tmp_path / "missing.jsonl")


def test_ntm_records_load_in_turn_order_and_bad_ones_are_named(tmp_path):
    path = tmp_path / "ntm.jsonl"
    path.write_text(json.dumps({"conversation_id": 7, "checkpoint_question": " goals? ",
                                "user_turns": [{"turn_id": 2, "content": "b"}, {"turn_id": 1, "content": "a"}]}) + "\n")
    (ep,) = load_ntm(path)
    assert (ep["id"], ep["user_turns"], ep["checkpoint_question"]) == ("7", ["a", "b"], "goals?")
    path.write_text(json.dumps({"conversation_id": 7}) + "\n")
    with pytest.raises(RheaError, match="not an NTM record"):
        load_ntm(path)


def test_context_tokens_leave_out_the_query_like_the_reference():
    messages = [{"role": "system", "content": "one two"}, {"role": "user", "content": "three"},
                {"role": "assistant", "content": "four five"}, {"role": "user", "content": "the query words here"}]
    assert context_tokens(messages) == 5 and context_tokens(messages[-1:]) == 0


def test_token_f1_and_topic_agreement():
    assert token_f1("Cortisol and glucagon.", "Cortisol and glucagon") == 1.0 and token_f1("", "x") == 0.0
    perfect = topic_agreement(["t1", "t1", "t2"], ["A", "A", "B"])
    assert perfect["pair_agreement"] == 1.0 and perfect["switch_accuracy"] == 1.0 and perfect["switch_recall"] == 1.0
    one_tree = topic_agreement(["t1", "t1", "t1"], ["A", "A", "B"])
    assert one_tree["pair_agreement"] == pytest.approx(1 / 3) and one_tree["switch_recall"] == 0.0
    assert one_tree["switch_precision"] is None
    with pytest.raises(RheaError, match="2 predicted vs 3 gold"):
        topic_agreement(["t1", "t1"], ["A", "A", "B"])
