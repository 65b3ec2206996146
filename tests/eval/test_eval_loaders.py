import pytest

from .eval_fixtures import (BABI_QA1, H4_JSON, IFEVAL, MT_BENCH_JSONL, MT_BENCH_REFERENCES,
                      MT_EVAL_GLOBAL, PI_LLM_VOCAB, write_json, write_jsonl)
from rhea.eval.loaders import (DataFormatError, load_babi, load_ifeval,
                               load_mt_bench_questions, load_mt_eval_global_inst,
                               load_pi_llm_vocabulary)


def test_mt_bench_questions_with_inline_and_file_references(tmp_path):
    questions = load_mt_bench_questions(write_jsonl(tmp_path / "question.jsonl", MT_BENCH_JSONL),
                                        write_jsonl(tmp_path / "gpt-4.jsonl", MT_BENCH_REFERENCES))
    assert [q.question_id for q in questions] == [81, 104, 131]
    assert questions[0].reference == ("Aloha.", "A note.")  # from the reference file
    assert questions[1].reference[0] == "David has no brother."  # inline wins
    assert questions[1].category == "reasoning" and len(questions[1].turns) == 2


def test_mt_bench_h4_json_list(tmp_path):
    (q,) = load_mt_bench_questions(write_json(tmp_path / "prompts.json", H4_JSON))
    assert (q.question_id, q.turns, q.reference) == (111, ("What is 2+3?", "Times 4?"),
                                                     ("5", "20"))


def test_mt_eval_global_inst(tmp_path):
    rows = load_mt_eval_global_inst(write_jsonl(tmp_path / "global_inst.jsonl", MT_EVAL_GLOBAL))
    assert rows[1].query == "Do cats secretly rule the internet?"
    assert "punctuation:no_comma" in rows[1].instructions


def test_ifeval(tmp_path):
    rows = load_ifeval(write_jsonl(tmp_path / "input_data.jsonl", IFEVAL))
    assert rows[2].instruction_id_list == ("change_case:english_lowercase",
                                           "length_constraints:number_words")
    assert rows[2].kwargs[1] == {"relation": "less than", "num_words": 50}
    assert rows[0].as_dict() == IFEVAL[0]


def test_pi_llm_vocabulary(tmp_path):
    vocab = load_pi_llm_vocabulary(write_json(tmp_path / "dict.json", PI_LLM_VOCAB))
    assert vocab["bird"][2] == "great tit" and set(vocab) == {"bird", "dessert", "tools"}


def test_babi_stories_and_questions(tmp_path):
    path = tmp_path / "qa1_single-supporting-fact_test.txt"
    path.write_text(BABI_QA1)
    stories = load_babi(path)
    assert len(stories) == 2 and len(stories[0]) == 9
    question = stories[0][2]
    assert question.is_question and (question.text, question.answer, question.supporting) == \
        ("Where is Mary?", "bathroom", (1,))
    assert not stories[1][0].is_question and stories[1][0].text == "Sandra travelled to the office."


@pytest.mark.parametrize("loader,content,match", [
    (load_mt_bench_questions, '{"question_id": 1, "category": "x"}\n', "missing field 'turns'"),
    (load_mt_bench_questions, '{"question_id": 1, "category": "x", "turns": []}\n',
     "non-empty list"),
    (load_mt_bench_questions, "not json\n", "invalid JSON"),
    (load_mt_eval_global_inst, '{"id": 1, "query": 5, "instructions": []}\n',
     "field 'query' is int"),
    (load_ifeval, '{"key": 1, "prompt": "p", "instruction_id_list": ["a"], "kwargs": []}\n',
     "differ in length"),
    (load_pi_llm_vocabulary, '{"bird": ["emu"]}', "fewer than 2 values"),
    (load_pi_llm_vocabulary, '["emu", "kea"]', "not a non-empty object"),
    (load_babi, "Mary went home.\n", "no leading story index"),
    (load_babi, "1 Where is Mary?\ta\tb\tc\n", "4 tab-separated fields"),
])
def test_malformed_files_name_file_line_and_format(tmp_path, loader, content, match):
    path = tmp_path / ("bad.json" if loader is load_pi_llm_vocabulary else "bad.jsonl")
    path.write_text(content)
    with pytest.raises(DataFormatError, match=match) as err:
        loader(path)
    assert "bad.json" in str(err.value) and "expected" in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_ifeval(tmp_path / "nope.jsonl")
