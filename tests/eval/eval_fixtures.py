"""Tiny inline copies of each public benchmark format, written to tmp_path by the tests."""
import json

MT_BENCH_JSONL = [
    {"question_id": 81, "category": "writing",
     "turns": ["Compose a short travel note about Hawaii.", "Rewrite it starting every "
               "sentence with the letter A."]},
    {"question_id": 104, "category": "reasoning",
     "turns": ["David has three sisters. Each of them has one brother. How many brothers "
               "does David have?", "If each sister has two brothers, how many brothers "
               "does David have?"],
     "reference": ["David has no brother.", "David has one brother."]},
    {"question_id": 131, "category": "extraction",
     "turns": ["Rate these reviews 1-5 as a JSON array.", "Add the release date."],
     "reference": ["[5, 1, 3]", ""]},
]
MT_BENCH_REFERENCES = [
    {"question_id": 81, "answer_id": "x", "model_id": "gpt-4",
     "choices": [{"index": 0, "turns": ["Aloha.", "A note."]}], "tstamp": 1.0},
]
H4_JSON = [{"category": "math", "prompt": ["What is 2+3?", "Times 4?"],
            "reference": ["5", "20"], "prompt_id": 111}]
MT_EVAL_GLOBAL = [
    {"id": 1, "query": "Is chocolate the best dessert in the world?",
     "instructions": ["startend:start_char", "punctuation:no_comma",
                      "change_case:lowercase", "format:json_format"]},
    {"id": 2, "query": "Do cats secretly rule the internet?",
     "instructions": ["startend:start_char", "punctuation:no_comma", "change_case:lowercase"]},
    {"id": 3, "query": "Should homework be banned?",
     "instructions": ["punctuation:no_comma", "change_case:lowercase", "content:placeholder"]},
]
IFEVAL = [
    {"key": 1001, "prompt": "Plan a trip to Japan. You are not allowed to use any commas.",
     "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
    {"key": 1012, "prompt": "Write a riddle. End it with 'Is there anything else?'",
     "instruction_id_list": ["startend:end_checker", "combination:repeat_prompt",
                             "detectable_format:haiku"],
     "kwargs": [{"end_phrase": "Is there anything else?"}, {"prompt_to_repeat": "Write."}, {}]},
    {"key": 1020, "prompt": "Answer in lowercase in at most 50 words.",
     "instruction_id_list": ["change_case:english_lowercase", "length_constraints:number_words"],
     "kwargs": [{}, {"relation": "less than", "num_words": 50}]},
]
PI_LLM_VOCAB = {"bird": ["emu", "kea", "great tit", "serin", "kestrel"],
                "dessert": ["flan", "baklava", "mochi", "trifle", "eclair"],
                "tools": ["awl", "rasp", "spirit level", "vise", "chisel"]}
BABI_QA1 = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
7 John moved to the office.
8 Sandra journeyed to the bathroom.
9 Where is Sandra? \tbathroom\t8
1 Sandra travelled to the office.
2 Sandra went to the bathroom.
3 Where is Sandra? \tbathroom\t2
4 Mary went to the kitchen.
5 Daniel travelled to the garden.
6 Where is Daniel? \tgarden\t5
"""


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def write_json(path, data):
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path
