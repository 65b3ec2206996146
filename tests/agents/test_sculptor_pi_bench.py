"""benchmarks/sculptor_pi.py end to end with scripted generators: settings, scoring, reward, resume."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rhea.agents.sculptor import PI_LLM_PROMPT
from rhea.backends.llm import ScriptedGenerator

from .sculptor_helpers import hermes
from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sculptor_pi.py"
VOCAB = {"fruit": ["kiwi", "mango", "plum", "pear"], "city": ["Oslo", "Lima", "Rome", "Kyiv"],
         "tool": ["saw", "drill", "awl", "vise"]}


@pytest.fixture(scope="module")
def bench():
    module = load_script(SCRIPT)
    return module


def test_paper_setting_is_table_1(bench, tmp_path):
    data = tmp_path / "vocab.json"
    data.write_text(json.dumps(VOCAB))
    cfg = bench.settings(bench.parse_args(["--data", str(data), "--paper-setting"]))
    assert (cfg["n_keys"], cfg["updates_per_key"], cfg["max_tool_calls"], cfg["prompt"], cfg["force_first_tool"]) == (
        46, [4, 8, 16, 32, 64, 128, 256], 20, "pi-llm", True)
    smoke = bench.settings(bench.parse_args(["--data", str(data), "--paper-setting", "--n-keys", "3",
                                             "--updates-per-key", "2"]))
    assert smoke["n_keys"] == 3 and smoke["updates_per_key"] == [2] and smoke["max_tool_calls"] == 20
    with pytest.raises(SystemExit):
        bench.parse_args(["--data", str(data), "--endpoint", "http://127.0.0.1:1/v1"])


def test_run_scores_both_methods_with_reward_and_resumes(bench, tmp_path):
    data = tmp_path / "vocab.json"
    data.write_text(json.dumps(VOCAB))
    args = bench.parse_args(["--data", str(data), "--n-keys", "3", "--updates-per-key", "2", "--max-tool-calls", "4"])
    cfg = bench.settings(args)
    episodes = bench.episodes_by_updates(VOCAB, cfg)
    (episode,) = episodes[2]
    updates = episode.turns[:-1]
    assert len(updates) == 6 and {t.meta["key"] for t in updates} == set(VOCAB)
    answers = episode.turns[-1].meta["answers"]
    right = "\n".join(f"{k}: {v}" for k, v in answers.items())
    conv = bench.conversation_of(episode, "stream")
    assert "<updates>" in conv.turns[0].user and all(f"{t.meta['key']}: {t.meta['value']}" in conv.turns[0].user
                                                      for t in updates)
    # plain answers right; sculptor fragments and folds (the PI-LLM prompt's recipe), then answers.
    fragment = hermes("fragment_context", start_marker="<updates>", end_marker="</updates>", num_fragments=2)
    gen = FoldingScript([right, fragment, "FOLD_FIRST", right])
    rows_path = tmp_path / "out.rows.jsonl"
    bench.run_backend("scripted", gen, None, episodes, cfg, rows_path, set())
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert [(r["method"], r["accuracy"], r["joint"]) for r in rows] == [("plain", 1.0, True), ("sculptor", 1.0, True)]
    sculptor = rows[1]
    assert sculptor["tool_names"] == ["fragment_context", "fold_fragment"] and sculptor["reward"] == 1.0
    first = sculptor["tool_trace"][0]
    assert first["arguments"]["start_marker"] == "<updates>" and first["error"] is None
    assert '"fragmented"' in first["result_head"]
    assert sculptor["context_tokens"] < sculptor["full_history_tokens"]  # the fold shrank the context
    assert gen.calls[1][0]["content"].startswith(PI_LLM_PROMPT)
    table = bench.summarize(rows)
    assert [(t["method"], t["keys"], t["accuracy"]) for t in table] == [("plain", 3, 1.0), ("sculptor", 3, 1.0)]
    assert table[1]["accuracy_ci95"][0] < 1 == table[1]["accuracy_ci95"][1] and table[1]["reward_mean"] == 1.0
    # one episode: no interval over episodes, and the paired difference with plain is that episode's
    assert table[0]["accuracy_episode_ci95"] == [None, None] and "accuracy_vs_plain" not in table[0]
    assert table[1]["accuracy_vs_plain"]["diff"] == 0.0 and table[1]["accuracy_vs_plain"]["episodes"] == 1
    # Resume: rows already there are skipped (the exhausted script would raise otherwise).
    done = {(r["backend"], r["method"], r["updates_per_key"], r["episode"]) for r in rows}
    bench.run_backend("scripted", ScriptedGenerator([]), None, episodes, cfg, rows_path, done)
    assert len(rows_path.read_text().splitlines()) == 2


def test_bm25_rag_baseline_follows_appendix_d4(bench):
    lines = "\n".join(f"key_{i % 7}: value_{i}" for i in range(600))
    from rhea.context import Conversation, Turn

    conv = Conversation([Turn(f"<updates>\n{lines}\n</updates>", "Noted.")])
    chunks = bench.rag_chunks(conv.turns[0].user, None)
    assert len(chunks) >= 10 and all(bench.count_tokens(c, None) <= bench.RAG_CHUNK_TOKENS for c in chunks)
    assert "\n".join(chunks) == conv.turns[0].user  # chunking loses nothing
    messages, used = bench.rag_messages(conv, "What is the current value of key_3?", None)
    assert messages[0]["content"] == bench.RAG_SYSTEM_PROMPT and used <= bench.RAG_BUDGET_TOKENS
    assert used > bench.RAG_BUDGET_TOKENS - bench.RAG_CHUNK_TOKENS  # filled to about 1500 tokens
    gen = ScriptedGenerator(["key_3: value_598"])
    done = bench.answer("rag-bm25", gen, None, conv, "What is the current value of key_3?",
                        {"max_new_tokens": 8})
    assert done["reply"] == "key_3: value_598" and done["context_tokens"] < done["full_history_tokens"]
    assert gen.calls[0] == messages


class FoldingScript(ScriptedGenerator):
    """Replies in order; "FOLD_FIRST" becomes a fold of the first fragment id the last tool result named."""

    def generate(self, messages, **kwargs):
        reply = super().generate(messages, **kwargs)
        if reply == "FOLD_FIRST":
            result = json.loads(messages[-1]["content"])
            reply = hermes("fold_fragment", fragment_id=result["fragments"][0]["fragment_id"])
        return reply
