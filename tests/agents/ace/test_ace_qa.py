"""bAbI / HotpotQA items and the answer check (inline fixtures, no shared data)."""
import dataclasses
import json

import pytest

from rhea.agents.ace.qa import babi_items, hotpot_items, is_correct
from rhea.eval.loaders import DataFormatError

BABI = """1 Mary got the milk there.
2 John moved to the bedroom.
3 Mary travelled to the hallway.
4 Where is the milk? \thallway\t1 3
5 John went to the garden.
6 Where is John? \tgarden\t5
1 Sandra went to the office.
2 Where is Sandra? \toffice\t1
"""


def test_babi_items_take_the_facts_before_each_question(tmp_path):
    path = tmp_path / "qa2_test.txt"
    path.write_text(BABI)
    items = babi_items(path)
    assert [i.answer for i in items] == ["hallway", "garden", "office"]
    assert items[0].passages == ("Mary got the milk there.", "John moved to the bedroom.", "Mary travelled to the hallway.")
    assert items[0].supporting == (0, 2) and items[1].supporting == (3,) and len(items[2].passages) == 1
    assert [i.answer for i in babi_items(path, max_passages=3)] == ["hallway", "office"]


def test_hotpot_items(tmp_path):
    rec = {"_id": "x1", "question": "Which city is the capital of the country where Tom lives?", "answer": "Paris",
           "context": [["Tom", ["Tom lives in France."]], ["France", ["France's capital is Paris.", "It is big."]]],
           "supporting_facts": [["Tom", 0], ["France", 0]]}
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([rec]))
    (item,) = hotpot_items(path)
    assert item.passages == ("Tom: Tom lives in France.", "France: France's capital is Paris. It is big.")
    assert item.supporting == (0, 1) and item.answer == "Paris"
    path.write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(DataFormatError, match="record 0"):
        hotpot_items(path)


@pytest.mark.parametrize("pred, gold, ok", [
    ("The hallway.", "hallway", True), ("It is in the Hallway", "the hallway", True), ("hall", "hallway", False),
    ("New York City", "new york", True), ("", "x", False),
])
def test_is_correct(pred, gold, ok):
    assert is_correct(pred, gold) is ok


@pytest.mark.parametrize("gold,prediction", [("The Rugby!", "rugby"), ("New York", "new york."),
                                             ("an apple", "Apple"), ("U.S.", "us")])
def test_ace_and_tgse_score_answers_with_one_normalisation(gold, prediction):
    """ACE's span check and TGSE's exact-match reward read answers the same way (SQuAD's normalisation)."""
    from rhea.agents.acr.tasks import drift_tasks
    from rhea.eval.suites import normalize_answer
    from rhea.training.acr.rewards import exact_match

    task = dataclasses.replace(drift_tasks(1)[0], answer=gold)
    assert normalize_answer(gold) == normalize_answer(prediction)
    assert is_correct(prediction, gold) and exact_match(prediction, task) == 1.0
