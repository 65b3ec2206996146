"""scripts/generate_replies.py: which prompts are used, named errors, a resumable run on a tiny model;
rhea.training.compressor.load_self_replies reads what it writes."""
import json
from pathlib import Path

import pytest

from rhea.testing import tiny_llama, tiny_tokenizer
from rhea.training.compressor import load_self_replies
from rhea.training.errors import TrainingDataError
from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate_replies.py"


@pytest.fixture(scope="module")
def gen():
    return load_script(SCRIPT)


def _data(root: Path) -> Path:
    (root / "mt_bench").mkdir(parents=True)
    (root / "ifeval").mkdir()
    (root / "mt_eval").mkdir()
    (root / "mt_bench" / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"question_id": 1, "turns": ["what is the cat", "and the dog"]},
        {"question_id": 2, "turns": ["paris is where"]},
        {"question_id": 3, "turns": []}]))
    # question 2 has a reference answer: a real reply the compressor trains/measures on, so no self-reply
    (root / "mt_bench" / "reference_answer_gpt-4.jsonl").write_text(json.dumps({"question_id": 2, "choices": []}) + "\n")
    (root / "ifeval" / "input_data.jsonl").write_text(json.dumps({"key": 7, "prompt": "the cat is blue"}) + "\n")
    (root / "mt_eval" / "raw_global_inst.jsonl").write_text(json.dumps({"id": 4, "query": "is the dog red"}) + "\n")
    return root


def test_prompts_leave_out_questions_with_real_reference_replies(gen, tmp_path):
    prompts = gen.load_prompts(_data(tmp_path))
    assert prompts == [("mt_bench/question.jsonl:1", "what is the cat"), ("ifeval/input_data.jsonl:7", "the cat is blue"),
                       ("mt_eval/raw_global_inst.jsonl:4", "is the dog red")]


def test_prompt_errors(gen, tmp_path):
    with pytest.raises(gen.PromptDataError, match="does not exist"):
        gen.load_prompts(tmp_path / "nope")
    with pytest.raises(gen.PromptDataError, match="holds none"):
        gen.load_prompts(tmp_path)
    (tmp_path / "ifeval").mkdir()
    (tmp_path / "ifeval" / "input_data.jsonl").write_text("{not json\n")
    with pytest.raises(gen.PromptDataError, match="not valid JSONL"):
        gen.load_prompts(tmp_path)


@pytest.mark.parametrize("argv, match", [(["--batch", "0"], "--batch"), (["--temperature", "-1"], "--temperature"),
                                         (["--top-p", "0"], "--top-p")])
def test_bad_arguments_are_usage_errors(gen, tmp_path, argv, match, capsys):
    with pytest.raises(SystemExit):
        gen.parse_args(["--data", str(tmp_path), "--out", str(tmp_path / "o.jsonl")] + argv)
    assert match in capsys.readouterr().err


def test_run_writes_rows_resumes_and_feeds_the_compressor(gen, tmp_path, capsys):
    data = _data(tmp_path / "data")
    tok = tiny_tokenizer()
    model_dir = tmp_path / "model"
    tiny_llama(len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "replies.jsonl"
    argv = ["--model", str(model_dir), "--data", str(data), "--out", str(out), "--batch", "2", "--max-new-tokens", "4",
            "--device", "cpu"]
    assert gen.main(argv + ["--limit", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert 1 <= len(rows) <= 2 and all(set(r) == {"source", "reply", "model", "settings"} for r in rows)
    assert gen.main(argv) == 0  # continues: only what is missing
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({r["source"] for r in rows}) == len(rows)
    capsys.readouterr()
    assert gen.main(argv) == 0
    assert f"{len(rows)} already in" in capsys.readouterr().out  # nothing written twice
    texts = load_self_replies(out)
    assert [t.source for t in texts] == [f"self:{r['source']}" for r in rows if r["reply"].strip()]


def test_load_self_replies_errors(tmp_path):
    with pytest.raises(TrainingDataError, match="does not exist"):
        load_self_replies(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"reply": "x"}) + "\n")
    with pytest.raises(TrainingDataError, match="line 1"):
        load_self_replies(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"source": "a", "reply": "  "}) + "\n")
    with pytest.raises(TrainingDataError, match="no reply"):
        load_self_replies(empty)
