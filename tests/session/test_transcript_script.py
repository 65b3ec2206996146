"""scripts/transcript.py on the tiny model: the trace fields, the markdown, the tokens table."""
from pathlib import Path

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "transcript.py"


def _module():
    mod = load_script(_PATH)
    return mod


def test_transcript_rows_markdown_and_table():
    t = _module()
    assert len(t.SCRIPT) == 20
    model = tiny_rhea(scorer="latent")  # a latent scorer: the query and replies are compressed and timed
    turns = ["from now on always answer in french .", "the cat", "the dog and the cat", "stop answering in french ."]
    rows = t.run(model, "rhea", turns, 3, log=lambda m: None)
    assert "generate" not in vars(model)  # the timer is gone again
    assert [len(r["instructions"]) for r in rows] == [1, 1, 1, 0]
    assert rows[0]["recognizer"][0]["recognizer"]["kind"] == "add"
    assert rows[3]["recognizer"][0]["im_events"][0]["action"] == "revoke"
    assert [len(r["past_turns"]) for r in rows] == [0, 1, 2, 3]
    assert rows[2]["prefix_reused_tokens"] > 0 and rows[1]["latency_s"]["compress_query"] > 0
    assert all(r["latency_s"]["compress_reply"] > 0 for r in rows)
    meta = {"policy": "rhea", "model": "tiny", "command": "x", "date": "d", "device": "cpu", "max_new_tokens": 3,
            "adapters_trained": False, "wall_s": 1.0}
    md = t.transcript_markdown(rows, meta)
    assert md.count("## Turn ") == 4 and "IM revoke" in md and "past turns: #1 " in md
    table = t.tokens_table_markdown({"rhea": rows, "vanilla": t.run(model, "vanilla", turns, 3, log=lambda m: None)}, meta)
    assert "| turn | rhea | vanilla | full history |" in table and table.count("\n| ") == 6  # header + 4 turns + total
