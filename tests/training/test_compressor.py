"""rhea.training.compressor: real-text loading, chunking, the held-apart split and the reconstruction measures."""
import json

import pytest
import torch

from rhea.testing import tiny_rhea
from rhea.training.compressor import (TextChunk, autoencode_batch, autoencode_prompt_ids, chunk_texts, control_order,
                                      greedy_reconstruction, load_reply_texts, mean_ci, reconstruction_scores,
                                      split_held_apart, teacher_forced_accuracy)
from rhea.training.errors import TrainingDataError


def _write_data(root, extra_replies: int = 0):
    (root / "dialogue_corpora").mkdir(parents=True)
    (root / "mt_bench").mkdir()
    (root / "mt_eval").mkdir()
    (root / "dialogue_corpora" / "ultrachat_200k_sample20.json").write_text(json.dumps([
        {"prompt": "q", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "the cat is blue"}]}]))
    (root / "mt_bench" / "reference_answer_gpt-4.jsonl").write_text(
        json.dumps({"question_id": 1, "choices": [{"index": 0, "turns": ["paris is the capital", "two three"]}]}) + "\n")
    (root / "mt_eval" / "raw_mt-bench_extended.jsonl").write_text(
        json.dumps({"conversation": [{"user": "u", "sys": "a dog said no"}, {"user": "v", "sys": ""}]}) + "\n")
    (root / "mt_eval" / "raw_documents.jsonl").write_text(json.dumps({"gen_resp": "one two three four five six"}) + "\n")
    more = [{"conversation": [{"user": "u", "sys": f"reply number {i} says the cat is blue and the dog is red"}]}
            for i in range(extra_replies)]
    with open(root / "mt_eval" / "raw_mt-bench_extended.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in more)


def test_load_reply_texts_reads_every_format(tmp_path):
    _write_data(tmp_path)
    texts = load_reply_texts(tmp_path)
    assert [t.text for t in texts] == ["the cat is blue", "paris is the capital", "two three", "a dog said no",
                                       "one two three four five six"]
    assert len({t.source for t in texts}) == len(texts)


def test_load_reply_texts_errors(tmp_path):
    with pytest.raises(TrainingDataError, match="does not exist"):
        load_reply_texts(tmp_path / "nope")
    with pytest.raises(TrainingDataError, match="holds none of"):
        load_reply_texts(tmp_path)
    (tmp_path / "mt_eval").mkdir()
    (tmp_path / "mt_eval" / "raw_documents.jsonl").write_text("{not json\n")
    with pytest.raises(TrainingDataError, match="not valid JSON"):
        load_reply_texts(tmp_path)


def test_chunk_texts_cuts_consecutive_pieces():
    model = tiny_rhea()
    text = TextChunk("doc:0:0", "one two three four five what when")
    pieces = chunk_texts(model.tokenizer, [text], max_tokens=3, min_tokens=1)
    assert [p.text for p in pieces] == ["one two three", "four five what", "when"]
    assert [p.source for p in pieces] == ["doc:0:0@0", "doc:0:0@3", "doc:0:0@6"]
    assert len(chunk_texts(model.tokenizer, [text], max_tokens=3, min_tokens=2)) == 2  # the 1-token tail is left out
    assert [p.text for p in chunk_texts(model.tokenizer, [text], max_tokens=3, first_only=True, min_tokens=1)] == ["one two three"]
    # overlapping windows: one every 2 tokens, none after a window has reached the end
    windows = chunk_texts(model.tokenizer, [text], max_tokens=3, min_tokens=1, stride=2)
    assert [p.text for p in windows] == ["one two three", "three four five", "five what when"]
    assert [p.source for p in windows] == ["doc:0:0@0", "doc:0:0@2", "doc:0:0@4"]
    assert chunk_texts(model.tokenizer, [text], max_tokens=3, min_tokens=1, stride=3) == pieces
    for bad in ({"max_tokens": 0}, {"stride": 0}):
        with pytest.raises(TrainingDataError):
            chunk_texts(model.tokenizer, [text], **bad)


def test_split_is_by_source_deterministic_and_disjoint():
    items = [TextChunk(f"f:{i}:0@{k}", f"t{i}-{k}") for i in range(200) for k in (0, 48)]
    train, test = split_held_apart(items, 0.2)
    assert split_held_apart(items, 0.2) == (train, test)
    roots = lambda xs: {c.source.split("@")[0] for c in xs}  # noqa: E731
    assert not roots(train) & roots(test)
    assert 0.1 < len(test) / len(items) < 0.3
    with pytest.raises(TrainingDataError):
        split_held_apart(items, 1.5)


def test_control_order_never_pairs_a_text_with_itself():
    for n in range(2, 9):
        perm = control_order(n)
        assert sorted(perm) == list(range(n)) and all(p != i for i, p in enumerate(perm))
    with pytest.raises(TrainingDataError):
        control_order(1)


def test_autoencode_batch_labels_cover_exactly_the_text():
    model = tiny_rhea()
    texts = ["the cat is blue", "paris"]
    batch = autoencode_batch(model, texts)
    for row, text in enumerate(texts):
        labels = [x for x in batch["labels"][row].tolist() if x != -100]
        # the reply's tokens, then the chat template's end-of-message tokens
        want = model.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert labels[: len(want)] == want
        assert int((batch["input_ids"][row] == model.mem_token_id).sum()) == model.n_mem
    prompt, mask, targets = autoencode_prompt_ids(model, texts)
    assert [t[: len(model.tokenizer(x, add_special_tokens=False)["input_ids"])] for t, x in zip(targets, texts)] == \
        [model.tokenizer(x, add_special_tokens=False)["input_ids"] for x in texts]
    assert int((prompt == model.mem_token_id).sum()) == 2 * model.n_mem


def test_teacher_forced_accuracy_matches_a_manual_count():
    model = tiny_rhea()
    texts = ["the cat is blue and red", "paris is the capital of france"]
    with torch.no_grad():
        lat = model.compress(texts)
        acc, counts = teacher_forced_accuracy(model, texts, lat)
        for row, text in enumerate(texts):
            b = autoencode_batch(model, [text])
            logits = model(input_ids=b["input_ids"], latent_embeds=lat[row:row + 1], attention_mask=b["attention_mask"]).logits
            pred, gold = logits[0, :-1].argmax(-1), b["labels"][0, 1:]
            keep = gold != -100
            assert counts[row] == int(keep.sum())
            assert acc[row] == pytest.approx(float((pred[keep] == gold[keep]).float().mean()))


def test_reconstruction_control_equals_own_when_latents_carry_nothing(monkeypatch):
    model = tiny_rhea()
    texts = ["the cat is blue", "paris is the capital", "one two three", "a dog said no"]
    scores = reconstruction_scores(model, texts, batch_size=3)
    assert len(scores["own"]) == len(scores["control"]) == 4
    assert all(0.0 <= x <= 1.0 for x in scores["own"] + scores["control"])
    # identical latents for every text: the control is the same input, so the gap is exactly 0
    fixed = model.compress(["red"])[0]
    monkeypatch.setattr(model, "compress", lambda t, batch_size=None: fixed.expand(len(t), -1, -1).clone())
    same = reconstruction_scores(model, texts, batch_size=3)
    assert same["own"] == same["control"]


def test_greedy_reconstruction_rows_are_consistent():
    model = tiny_rhea()
    texts = ["the cat is blue", "paris is the capital", "one two"]
    for control in (False, True):
        rows = greedy_reconstruction(model, texts, batch_size=2, control=control)
        assert len(rows) == 3
        for r in rows:
            assert 0.0 <= r["prefix_share"] <= 1.0 and r["exact"] == (r["prefix_share"] == 1.0)


def test_mean_ci():
    ci = mean_ci([1.0] * 10)
    assert ci["mean"] == 1.0 and ci["lo"] == ci["hi"] == 1.0 and ci["n"] == 10
    ci = mean_ci([0.0, 1.0] * 50)
    assert ci["lo"] < 0.5 < ci["hi"] and ci["hi"] - ci["lo"] < 0.25


def test_chunked_reconstruction_reads_one_block_per_piece():
    """With chunk_tokens, each text is compressed in pieces and reconstructed after all of its blocks: the number
    of placeholders equals the text's latent rows, one piece matches the whole-text path exactly, and greedy
    decoding runs on uneven rows (the control's text may have another number of pieces)."""
    model = tiny_rhea()
    texts = ["the cat is blue and the dog is red and the bird is green", "one two", "paris is the capital of france"]
    lens = [len(model.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    lat = model.compress_replies(texts, batch_size=2, chunk_tokens=4)
    assert [x.shape[0] for x in lat] == [-(-n // 4) * model.n_mem for n in lens]
    with torch.no_grad():
        acc, counts = teacher_forced_accuracy(model, texts, lat)
        b = autoencode_batch(model, texts, [x.shape[0] for x in lat])
        assert [int((row == model.mem_token_id).sum()) for row in b["input_ids"]] == [x.shape[0] for x in lat]
        big = max(lens)
        whole = reconstruction_scores(model, texts, batch_size=2)
        one_piece = reconstruction_scores(model, texts, batch_size=2, chunk_tokens=big)
        assert one_piece["own"] == pytest.approx(whole["own"]) and one_piece["control"] == pytest.approx(whole["control"])
        chunked = reconstruction_scores(model, texts, batch_size=2, chunk_tokens=4)
        assert chunked["n_tokens"] == whole["n_tokens"] and all(0.0 <= x <= 1.0 for x in chunked["own"])
        for control in (False, True):
            rows = greedy_reconstruction(model, texts, batch_size=2, control=control, chunk_tokens=4)
            assert len(rows) == 3 and all(0.0 <= r["prefix_share"] <= 1.0 for r in rows)
