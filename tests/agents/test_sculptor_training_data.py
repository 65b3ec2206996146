"""Sculptor trajectories reach the trainer: write_jsonl lines load and tokenize with loss on completions only."""
from __future__ import annotations

from rhea.agents.sculptor import write_jsonl
from rhea.testing import tiny_tokenizer
from rhea.training.data import build_trajectory_samples
from rhea.training.formats import load_trajectories

from .sculptor_helpers import hermes, make_loop, planned_fragment_ids

IGNORE = -100


def test_jsonl_from_a_run_is_what_the_trainer_reads(conversation, tmp_path):
    ids = planned_fragment_ids(conversation, 0, "<log>", "</log>", 2)
    replies = [hermes("fragment_context", start_marker="<log>", end_marker="</log>", num_fragments=2),
               hermes("fold_fragment", fragment_id=ids[0]), "value_10"]
    loop, _ = make_loop(conversation, replies)
    result = loop.run(conversation, "What is the latest value of key_1?")
    path = tmp_path / "trajectories.jsonl"
    with open(path, "w") as fp:
        assert write_jsonl([result], fp, rewards=[1.0]) == 3  # cut at the fragment, the fold, then the answer

    loaded = load_trajectories(path)
    assert [sum(mask) for _, mask in loaded] == [1, 1, 1]  # each completion trained exactly once
    assert loaded[1][0][-2]["content"] == replies[1] and loaded[2][0][-1]["content"] == "value_10"
    assert loaded[1][0][-1]["role"] == "tool" and not loaded[1][1][-1]  # the fold's result, without loss
    assert any(m["role"] == "tool" for m in loaded[0][0])

    tok = tiny_tokenizer()
    samples = build_trajectory_samples(loaded, tok, max_length=4096)
    assert len(samples.samples) == 3 and not samples.skipped
    for sample in samples.samples:
        trained = [t for t, label in zip(sample.input_ids, sample.labels) if label != IGNORE]
        assert trained and len(trained) < len(sample.input_ids)
        assert all(label in (IGNORE, t) for t, label in zip(sample.input_ids, sample.labels))
