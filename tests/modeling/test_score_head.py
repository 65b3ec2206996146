"""The learned retrieval read-out: config, score_view, save/load, the trainer and the script (tiny models)."""
from __future__ import annotations

import json

import pytest
import torch

from rhea.errors import CheckpointError, RheaConfigError
from rhea.modeling import RheaConfig, RheaForCausalLM
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME, ScoreHead
from rhea.testing import save_tiny_base, tiny_rhea
from rhea.training.errors import TrainingDataError
from rhea.training.score_head import (QueryReply, latent_blocks, load_query_reply_pairs, max_cosine, recall_at,
                                      split_pairs, train_score_head)


def test_config_validates_the_head():
    assert RheaConfig().score_head == 0 and RheaConfig().score_head_layers == [0]
    with pytest.raises(RheaConfigError, match="score_head=-1"):
        RheaConfig(score_head=-1)
    with pytest.raises(RheaConfigError, match="distinct"):
        RheaConfig(score_head=8, score_head_layers=[0, 0], latent_injection="states")
    with pytest.raises(RheaConfigError, match="only latent_injection='states'"):
        RheaConfig(score_head=8, score_head_layers=[0, 1])
    with pytest.raises(RheaConfigError, match="run `rhea calibrate` again"):
        RheaConfig(score_head=8, latent_center=[0.0] * 4)


def test_score_view_applies_the_head_to_the_chosen_blocks():
    model = tiny_rhea(latent_injection="states")
    h = model.hidden_size
    lat = model.compress(["the cat sat", "a dog ran far"]).detach()
    assert torch.equal(model.score_view(lat), lat[..., :h])            # no head: the final states
    head = ScoreHead(h, 5, [0, 1])
    with torch.no_grad():
        head.proj.weight.normal_()
    model.set_score_head(head)
    assert model.config.score_head == 5 and model.config.score_head_layers == [0, 1] and model.score_width == 5
    want = torch.cat([lat[..., :h], lat[..., h:2 * h]], -1) @ head.proj.weight.T + head.proj.bias
    torch.testing.assert_close(model.score_view(lat), want)
    half = ScoreHead(h, 5, [0, 1]).to(torch.bfloat16)     # a model cast to bf16 casts its head: still fp32 out
    assert half(lat).dtype == torch.float32
    with pytest.raises(RheaConfigError, match="does not fit"):
        model.set_score_head(ScoreHead(h, 5, [9]))
    with pytest.raises(RheaConfigError, match="do not exist"):
        RheaForCausalLM(model.peft_model, model.tokenizer, RheaConfig(n_mem=4, score_head=3, score_head_layers=[7],
                                                                      latent_injection="states"), model.mem_token_id)


def test_head_round_trips_and_missing_file_is_named(tmp_path):
    base = save_tiny_base(tmp_path / "base")
    model = tiny_rhea()
    model.config = RheaConfig(**{**model.config.to_dict(), "base_model": base})
    head = ScoreHead(model.hidden_size, 6)
    with torch.no_grad():
        head.proj.weight.normal_()
        head.proj.bias.normal_()
    model.set_score_head(head)
    model.save_pretrained(tmp_path / "m")
    again = RheaForCausalLM.from_pretrained(tmp_path / "m")
    lat = model.compress(["hello there"]).detach()
    torch.testing.assert_close(again.score_view(lat), model.score_view(lat))
    # removing the head and saving again removes the stale file
    again.set_score_head(None)
    again.save_pretrained(tmp_path / "m")
    assert not (tmp_path / "m" / SCORE_HEAD_WEIGHTS_NAME).exists()
    assert RheaForCausalLM.from_pretrained(tmp_path / "m").score_head is None
    model.save_pretrained(tmp_path / "m2")
    (tmp_path / "m2" / SCORE_HEAD_WEIGHTS_NAME).unlink()
    with pytest.raises(CheckpointError, match=f"{SCORE_HEAD_WEIGHTS_NAME} is listed in rhea_manifest.json but missing"):
        RheaForCausalLM.from_pretrained(tmp_path / "m2")
    (tmp_path / "m2" / "rhea_manifest.json").unlink()  # a save without digests: the config's check names it
    with pytest.raises(CheckpointError, match="score_head=6"):
        RheaForCausalLM.from_pretrained(tmp_path / "m2")


def test_episodic_memory_scores_through_the_head():
    from rhea.context.conversation import Turn
    from rhea.memory.episodic import EpisodicMemory

    model = tiny_rhea()
    model.set_score_head(ScoreHead(model.hidden_size, 3))
    em = EpisodicMemory(model.compress_replies, score_view=model.score_view)
    em.extend([Turn("a", "the cat sat"), Turn("b", "a dog ran")])
    assert em.query_latents("cat?").shape[-1] == 3 and em.score("cat?").shape == (2,)


def _write_pairs(root):
    (root / "dialogue_corpora").mkdir(parents=True)
    convs = [{"messages": [{"role": "user", "content": f"question {c} {i}"} if j % 2 == 0 else
                           {"role": "assistant", "content": f"answer {c} {i}"} for i in range(2) for j in range(2)]}
             for c in range(12)]
    (root / "dialogue_corpora" / "ultrachat_200k_sample20.json").write_text(json.dumps(convs))
    (root / "mt_eval").mkdir()
    (root / "mt_eval" / "raw_mt-bench_extended.jsonl").write_text(
        json.dumps({"conversation": [{"user": "why sky blue", "sys": "scattering"}, {"user": "", "sys": "x"}]}) + "\n")


def test_pairs_load_and_split_by_conversation(tmp_path):
    _write_pairs(tmp_path)
    pairs = load_query_reply_pairs(tmp_path)
    assert len(pairs) == 12 * 2 + 1 and pairs[0] == QueryReply("ultrachat:0:0", "question 0 0", "answer 0 0")
    train, test = split_pairs(pairs, 0.5)
    assert train and test and len(train) + len(test) == len(pairs)
    assert not {p.source.rsplit(":", 1)[0] for p in train} & {p.source.rsplit(":", 1)[0] for p in test}
    with pytest.raises(TrainingDataError, match="holds none"):
        load_query_reply_pairs(tmp_path / "dialogue_corpora")
    with pytest.raises(TrainingDataError, match="does not exist"):
        load_query_reply_pairs(tmp_path / "nope")
    with pytest.raises(TrainingDataError, match="share"):
        split_pairs(pairs, 1.0)


def test_recall_counts_ties_against_the_query():
    s = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    assert recall_at(s, (1, 2)) == {"R@1": 0.5, "R@2": 1.0}


def test_trainer_learns_a_planted_match_and_folds_the_standardisation():
    g = torch.Generator().manual_seed(0)
    n, slots, h = 320, 3, 8
    topic = torch.randn(n, h, generator=g)
    q, r = torch.randn(n, slots, 2 * h, generator=g), torch.randn(n, slots, 2 * h, generator=g)
    q[:, 0, h:] += 3 * topic                                     # the match: block 1 of one slot on each side
    r[:, -1, h:] += 3 * topic
    q[..., :h], r[..., :h] = q[..., :h] * 8, r[..., :h] * 8      # block 0: loud noise that raw cosine reads
    q, r = q + 10.0, r + 10.0                                    # and a large shared offset
    head, rep = train_score_head(h, q[:256], r[:256], dim=8, layers=[0, 1], steps=200, batch=64, lr=3e-3,
                                 q_test=q[256:], r_test=r[256:], eval_every=100, log=None)
    assert rep.after["R@1"] > rep.before["R@1"] + 0.3 and len(rep.curve) == 2
    # the saved head reads raw blocks: its output equals the trainer's measure on them
    direct = max_cosine(head.proj(q[256:]), head.proj(r[256:]))
    assert recall_at(direct)["R@1"] == rep.after["R@1"]
    with pytest.raises(TrainingDataError, match=">= 2 matching"):
        train_score_head(h, q[:1], r[:1], dim=4, layers=[0, 1])


def test_latent_blocks_gather_the_requested_layers():
    model = tiny_rhea(latent_injection="states")
    h = model.hidden_size
    full = model.compress(["one two", "three"]).detach()
    got = latent_blocks(model, ["one two", "three"], [1], batch_size=1)
    torch.testing.assert_close(got, full[..., h:2 * h].float())


def test_script_trains_saves_and_reuses_its_cache(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("tsh", Path(__file__).parents[2] / "scripts" / "train_score_head.py")
    tsh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tsh)
    _write_pairs(tmp_path / "data")
    base = save_tiny_base(tmp_path / "base")
    model = tiny_rhea(latent_injection="states")
    model.config = RheaConfig(**{**model.config.to_dict(), "base_model": base})
    model.save_pretrained(tmp_path / "src")
    args = [str(tmp_path / "src"), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--dim", "4",
            "--layers", "0", "1", "--steps", "20", "--batch", "8", "--held-apart", "0.4"]
    res = tsh.main(args)
    assert res["steps"] == 20 and res["held_apart_pairs"] > 1 and "R@1" in res["after"]
    loaded = RheaForCausalLM.from_pretrained(tmp_path / "out")
    assert loaded.config.score_head == 4 and loaded.config.score_head_layers == [0, 1]
    assert loaded.config.extra["score_head"]["held_apart_after"] == res["after"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "learned head: blocks [0, 1] -> 4 dims" in card and "`score_head.safetensors`" in card
    res2 = tsh.main(args[:-6] + ["--layers", "1", "--steps", "10", "--batch", "8", "--held-apart", "0.4"])
    assert "compressing 0 of" in capsys.readouterr().out and res2["layers"] == [1]
    with pytest.raises(SystemExit, match="not a Rhea directory"):
        tsh.main([str(tmp_path / "data"), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o2")])
    with pytest.raises(SystemExit, match="was not written by this script"):
        tsh.main([str(tmp_path / "src"), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "src" / "..")])
