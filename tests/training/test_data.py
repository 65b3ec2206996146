import json

import pytest

from rhea.context import Conversation, Turn
from rhea.training import (TierMix, build_conversation_samples, build_trajectory_samples, collate, load_conversations,
                           load_trajectories)
from rhea.training.errors import TrainingDataError

TURNS = [("what is the capital", "paris"), ("which city", "paris is the city"), ("what color", "blue")]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("record", [
    {"messages": [{"role": "system", "content": "be short"}] + [m for u, a in TURNS for m in
                  ({"role": "user", "content": u}, {"role": "assistant", "content": a})]},
    {"conversations": [{"from": "system", "value": "be short"}] + [m for u, a in TURNS for m in
                       ({"from": "human", "value": u}, {"from": "gpt", "value": a})]},
    {"data": [x for pair in TURNS for x in pair]},
], ids=["openai", "sharegpt", "ultrachat"])
def test_each_format_loads_the_same_turns(tmp_path, record):
    [(system, conv)] = load_conversations(_write(tmp_path / "d.jsonl", [record]))
    assert [(t.user, t.assistant) for t in conv] == TURNS
    assert system in ("be short", "")


def test_bad_records_name_the_line_and_the_fix(tmp_path):
    with pytest.raises(TrainingDataError, match=r"d.jsonl:1.*expected 'messages'"):
        load_conversations(_write(tmp_path / "d.jsonl", [{"text": "hi"}]))
    with pytest.raises(TrainingDataError, match="must alternate"):
        load_conversations(_write(tmp_path / "d.jsonl", [{"data": ["a"]}, ][:0] + [{"messages": [
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}]))
    with pytest.raises(TrainingDataError, match="does not exist"):
        load_conversations(tmp_path / "nope.jsonl")
    (tmp_path / "ds").mkdir()
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(TrainingDataError, match="datasets` is not installed"):
            load_conversations(tmp_path / "ds")


def test_samples_put_loss_on_the_reply_only_and_compress_past_replies(tiny_model):
    tok = tiny_model.tokenizer
    ds = build_conversation_samples([("", Conversation([Turn(u, a) for u, a in TURNS]))], tok,
                                    n_mem=tiny_model.n_mem, tiers=TierMix(raw=0.0, drop=0.0))
    last = ds.samples[-1]
    assert last.compress_texts == ["paris", "paris is the city"]
    assert last.input_ids.count(tiny_model.mem_token_id) == 2 * tiny_model.n_mem
    trained = [i for i, lab in zip(last.input_ids, last.labels) if lab != -100]
    assert tok.decode(trained).startswith("blue")
    assert "blue" not in tok.decode([i for i, lab in zip(last.input_ids, last.labels) if lab == -100])


def test_tier_mix_keeps_some_replies_raw_and_drops_some_turns(tiny_model):
    conv = Conversation([Turn(f"what is {c}", f"{c} is a color") for c in ["red", "blue", "green", "yellow"] * 3])
    ds = build_conversation_samples([("", conv)], tiny_model.tokenizer, n_mem=tiny_model.n_mem,
                                    tiers=TierMix(raw=0.3, drop=0.3), seed=1)
    last = ds.samples[-1]
    n_latent = len(last.compress_texts)
    user_turns = tiny_model.tokenizer.decode(last.input_ids).count("user")
    assert 0 < n_latent < 11 and user_turns < 12  # some latents, some raw, some turns dropped
    again = build_conversation_samples([("", conv)], tiny_model.tokenizer, n_mem=tiny_model.n_mem,
                                       tiers=TierMix(raw=0.3, drop=0.3), seed=1)
    assert [s.input_ids for s in again.samples] == [s.input_ids for s in ds.samples]


def test_too_long_samples_are_skipped_and_reported(tiny_model):
    conv = Conversation([Turn("what is the capital", "paris " * 40), Turn("which city", "paris")])
    ds = build_conversation_samples([("", conv)], tiny_model.tokenizer, n_mem=tiny_model.n_mem,
                                    tiers=TierMix(0.0, 0.0), max_length=30, max_compress_length=20)
    assert len(ds.samples) == 0 and len(ds.skipped) == 2
    assert "max_length=30" in ds.skipped[0].reason and "max_compress_length=20" in ds.skipped[1].reason
    assert "2 skipped" in ds.report()


def test_trajectories_train_only_masked_messages(tmp_path, tiny_model):
    msgs = [{"role": "user", "content": "what is the capital"}, {"role": "assistant", "content": "one"},
            {"role": "user", "content": "which city"}, {"role": "assistant", "content": "paris"}]
    path = _write(tmp_path / "t.jsonl", [{"messages": msgs, "loss_mask": [False, False, False, True]}])
    ds = build_trajectory_samples(load_trajectories(path), tiny_model.tokenizer)
    [s] = ds.samples
    assert tiny_model.tokenizer.decode([i for i, lab in zip(s.input_ids, s.labels) if lab != -100]).startswith("paris")
    with pytest.raises(TrainingDataError, match="non-assistant"):
        load_trajectories(_write(tmp_path / "b.jsonl", [{"messages": msgs, "loss_mask": [True, False, False, False]}]))


def test_collate_left_pads():
    from rhea.training import Sample

    b = collate([Sample([1, 2], [-100, 2], ["a"]), Sample([3], [3], ["b", "c"])], pad_token_id=0)
    assert b["attention_mask"].tolist() == [[1, 1], [0, 1]] and b["compress_texts"] == ["a", "b", "c"]
