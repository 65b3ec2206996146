import json

import pytest
import torch

from rhea.calibration import CalibrationDataError, CalibrationError, fit_thresholds, read_triples_jsonl, triples, write_triples_jsonl
from rhea.calibration.cli import calibrate_model
from rhea.calibration.fit import TripleScores
from rhea.calibration.data import FAMILIES
from rhea.context import Turn
from rhea.memory.episodic import EpisodicMemory


def test_splits_share_no_family_and_no_text():
    names = {s: {f.name for f in fams} for s, fams in FAMILIES.items()}
    assert not (names["train"] & names["calibrate"]) and not (names["train"] & names["heldout"])
    assert not (names["calibrate"] & names["heldout"])
    texts = {s: {x for t in triples(s, 200, seed=0) for x in (t.reply, t.query, t.unrelated)} for s in FAMILIES}
    assert not (texts["train"] & texts["heldout"]) and not (texts["calibrate"] & texts["heldout"])


def test_triples_are_deterministic_and_unrelated_comes_from_another_family():
    a, b = triples("train", 50, seed=3), triples("train", 50, seed=3)
    assert a == b and a != triples("train", 50, seed=4)
    assert all(t.family != t.unrelated_family for t in a)


def test_triples_roundtrip_and_bad_input(tmp_path):
    path = tmp_path / "t.jsonl"
    write_triples_jsonl(str(path), "calibrate", 5, seed=1)
    assert read_triples_jsonl(str(path)) == triples("calibrate", 5, seed=1)
    (tmp_path / "bad.jsonl").write_text('{"reply": "x"}\n')
    with pytest.raises(CalibrationDataError, match="line 1"):
        read_triples_jsonl(str(tmp_path / "bad.jsonl"))
    with pytest.raises(CalibrationDataError, match="unknown split"):
        triples("test", 3)


def test_fit_puts_tau_low_in_the_middle_of_the_gap_and_tau_high_at_the_raw_quantile():
    fit = fit_thresholds(torch.tensor([0.6, 0.7, 0.8, 0.9]), torch.tensor([0.1, 0.2, 0.3, 0.4]), raw=0.5)
    assert fit.targets_met and 0.4 < fit.tau_low < 0.6 and fit.tau_low == pytest.approx(0.5, abs=0.03)
    assert fit.tau_high == pytest.approx(0.75) and fit.raw_rate == 0.5


def test_rates_that_hit_a_target_exactly_meet_it():
    # 9 of 10 kept is exactly keep=0.9; in float32 the mean is 0.89999998 and used to fail the target
    related = torch.tensor([0.05] + [0.9] * 9)
    unrelated = torch.linspace(0.0, 0.5, 10)
    fit = fit_thresholds(related, unrelated, keep=0.9, drop=0.8)
    assert fit.keep_rate == 0.9 and fit.targets_met and 0.5 < fit.tau_low < 0.9
    scores = TripleScores(related, unrelated)
    assert scores.tier_accuracy(fit.tau_low) == (0.9, 1.0)


def test_fit_reports_unmet_targets_when_scores_overlap():
    fit = fit_thresholds(torch.tensor([0.5, 0.6, 0.7, 0.8]), torch.tensor([0.55, 0.65, 0.75, 0.85]))
    assert not fit.targets_met and fit.keep_rate >= 0.9
    with pytest.raises(CalibrationError, match="keep"):
        fit_thresholds(torch.ones(3), torch.zeros(3), keep=1.5)


def test_calibrate_model_writes_thresholds_and_centre_into_the_config(tiny_model, tmp_path):
    report = calibrate_model(tiny_model, triples("calibrate", 12, seed=0))
    cfg = tiny_model.config
    assert report["centering"] in ("none", "fixed") and cfg.tau_low <= cfg.tau_high
    assert (cfg.latent_center is not None) == (report["centering"] == "fixed")
    assert cfg.extra["calibration"]["n_triples"] == 12
    tiny_model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "rhea_config.json").read_text())
    assert saved["tau_low"] == cfg.tau_low and saved["latent_centering"] == cfg.latent_centering


def test_rhea_calibrate_cli_updates_a_model_directory(tiny_model, tmp_path, capsys, monkeypatch):
    import rhea.modeling.loading
    from rhea.cli import main

    tiny_model.save_pretrained(tmp_path / "m")  # the tiny base is not loadable by name: hand the CLI the model
    monkeypatch.setattr(rhea.modeling.loading, "load_rhea_model", lambda path, **kw: tiny_model)
    assert main(["calibrate", "--model", str(tmp_path / "m"), "--n", "8", "--centering", "fixed"]) == 0
    saved = json.loads((tmp_path / "m" / "rhea_config.json").read_text())
    assert saved["latent_centering"] == "fixed" and len(saved["latent_center"]) == tiny_model.hidden_size
    assert saved["extra"]["calibration"]["centering"] == "fixed"
    assert main(["calibrate", "--model", str(tmp_path / "nowhere")]) == 1
    assert "--out" in capsys.readouterr().err


def test_episodic_centering_modes(tiny_model):
    em = {m: EpisodicMemory(tiny_model.compress, center=torch.ones(tiny_model.hidden_size), centering=m)
          for m in ("fixed", "running", "none")}
    for m in em.values():
        m.extend([Turn("a", "the cat sat"), Turn("b", "dogs bark loudly")])
    q = em["none"].query_latents("cat?")
    from rhea_kernels.reference import turn_scores

    vk = torch.stack([e.latents for e in em["none"].entries])[None]
    assert torch.allclose(em["none"].score(q), turn_scores(q[None], vk)[0])
    assert torch.allclose(em["fixed"].score(q), turn_scores(q[None], vk, center=torch.ones(tiny_model.hidden_size))[0])
    running = torch.cat([vk[0].reshape(-1, vk.shape[-1]), q]).mean(0)
    assert torch.allclose(em["running"].score(q), turn_scores(q[None], vk, center=running)[0], atol=1e-6)
    with pytest.raises(ValueError, match="centering"):
        EpisodicMemory(tiny_model.compress, centering="mean")


def _unit_latents(cosines: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Replies along e0 and, per triple, a query at the given cosine to it: [N, 1, 3] each."""
    import math

    replies = torch.tensor([[[1.0, 0.0, 0.0]]] * len(cosines))
    queries = torch.tensor([[[c, math.sqrt(1 - c * c), 0.0]] for c in cosines])
    return replies, queries


def test_family_transfer_prefers_thresholds_that_hold_on_an_unseen_family():
    from rhea.calibration.cli import _family_transfer
    from rhea.calibration.data import Triple
    from rhea.calibration.fit import TripleLatents

    fams = [Triple(f, "r", "q", "u", "x") for f in "aabb"]
    r, q = _unit_latents([0.8, 0.8, 0.8, 0.8])
    _, u = _unit_latents([0.2, 0.2, 0.2, 0.2])
    steady = TripleLatents(r, q, u)
    r, q = _unit_latents([0.9, 0.9, 0.5, 0.5])
    _, u = _unit_latents([0.6, 0.6, 0.2, 0.2])
    shifted = TripleLatents(r, q, u)
    assert _family_transfer(fams, steady, False, keep=0.9, drop=0.8, raw=0.5) == pytest.approx(0.1)
    assert _family_transfer(fams, shifted, False, keep=0.9, drop=0.8, raw=0.5) < 0
    assert _family_transfer(fams[:2], steady, False, keep=0.9, drop=0.8, raw=0.5) is None


def test_family_transfer_centres_each_fold_without_the_left_out_family():
    from rhea.calibration.cli import _family_transfer
    from rhea.calibration.data import Triple
    from rhea.calibration.fit import TripleLatents

    fams = [Triple(f, "r", "q", "u", "x") for f in "aaabbbccc"]
    offset = {"a": 0.0, "b": 3.0, "c": -2.0}  # a centre that saw a family would remove its shift
    shift = torch.stack([torch.full((1, 6), offset[t.family]) for t in fams])
    g = torch.Generator().manual_seed(0)
    lat = TripleLatents(*(torch.randn(9, 1, 6, generator=g) + shift for _ in range(3)))
    centres = []

    class Recording(TripleLatents):
        def subset(self, keep):
            return Recording(*vars(super().subset(keep)).values())

        def scores(self, center=None):
            centres.append((self.replies.shape[0], center))
            return super().scores(center)

    _family_transfer(fams, Recording(*vars(lat).values()), True, keep=0.9, drop=0.8, raw=0.5)
    assert len(centres) == 6  # per fold: the 6 fitting triples, then the 3 left out
    for fold, fam in enumerate("abc"):
        rest = lat.subset(torch.tensor([t.family != fam for t in fams]))
        (n_fit, c_fit), (n_out, c_out) = centres[2 * fold], centres[2 * fold + 1]
        assert (n_fit, n_out) == (6, 3)
        assert torch.allclose(c_fit, rest.mean()) and torch.allclose(c_out, rest.mean())
        assert not torch.allclose(c_out, lat.mean())
    centres.clear()
    _family_transfer(fams, Recording(*vars(lat).values()), False, keep=0.9, drop=0.8, raw=0.5)
    assert all(c is None for _, c in centres)




def test_triples_of_a_chunked_compressor_score_and_centre_on_their_real_rows():
    """With RheaConfig.compress_chunk_tokens, calibration compresses texts as the policy does: uneven row counts
    are padded (scores unchanged: each pair's max-cosine over its own rows) and the centre averages real rows only."""
    from rhea.calibration.data import Triple
    from rhea.calibration.fit import encode_triples
    from rhea.testing import tiny_rhea
    from rhea_kernels.reference import turn_scores

    model = tiny_rhea(n_mem=2, compress_chunk_tokens=2)
    ts = [Triple("f", "the cat is blue and the dog is red", "what colour is the cat", "hi", "x"),
          Triple("f", "paris", "capital of france and of italy", "a dog", "x")]
    lat = encode_triples(model, ts)
    assert lat.rows is not None and lat.rows.shape == (3, 2)
    with torch.no_grad():
        views = {t: model.score_view(model.compress_replies([t])[0]).float() for tr in ts for t in (tr.reply, tr.query, tr.unrelated)}
    for i, tr in enumerate(ts):
        want = turn_scores(views[tr.query][None], views[tr.reply][None, None])[0, 0]
        torch.testing.assert_close(lat.scores().related[i], want, rtol=1e-5, atol=1e-5)
    real = torch.cat([views[t] for t in [x.reply for x in ts] + [x.query for x in ts] + [x.unrelated for x in ts]])
    torch.testing.assert_close(lat.mean(), real.mean(0), rtol=1e-5, atol=1e-6)
    keep = torch.tensor([False, True])
    assert lat.subset(keep).rows.tolist() == lat.rows[:, keep].tolist()
