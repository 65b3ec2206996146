"""Held-apart fact recall (`rhea.eval.fact_recall`, `benchmarks/fact_recall.py`): scorer, the
shipped set and its independence from the training templates, statistics, the criterion, and the
benchmark end to end on a tiny random model."""
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from rhea.errors import RheaError
from rhea.eval import fact_recall as fr
from rhea.training import synthetic
from tests.repo_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fact_recall.py"


def _item(**kw):
    rec = {"id": "t-1", "kind": "code", "user": "what is the code ?", "reply": "the code is 4 and that is it .",
           "filler_user": "what is blue ?", "filler_reply": "blue is a color .", "question": "what was the code ?",
           "answers": ["4", "four"]}
    rec.update(kw)
    return rec


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# ----------------------------------------------------------------------------- scorer
@pytest.mark.parametrize("answer,accepted,ok", [
    ("The code is 8316.", ["8316"], True),
    ("The code is 83160.", ["8316"], False),
    ("It is 18316", ["8316"], False),
    ("Your slot is at 6.15pm", ["6:15"], True),
    ("at 16:15", ["6:15"], False),
    ("It holds 1,250 people", ["1250"], True),
    ("Head to TROMSØ for the lights", ["Tromso"], True),
    ("Speak to Mr Achterberg-Smith", ["Achterberg"], True),
    ("It was Ferreira Lowe", ["Ferreira-Lowe"], True),
    ("Gate 47C", ["47C"], True),
    ("Gate 47", ["47C"], False),
    ("Room B2140", ["B214"], False),
    ("the Stratos Pro", ["Stratos Pro 14"], False),
    ("", ["x"], False),
])
def test_is_correct(answer, accepted, ok):
    assert fr.is_correct(answer, accepted) is ok


def test_normalise_folds_case_accents_and_separators():
    assert fr.normalise("  Tromsø, 1,250 — 9.5 L; 3:40!") == "tromso 1250 9:5 l 3:40"


# ----------------------------------------------------------------------------- the shipped set
def test_shipped_set_has_enough_items_of_enough_kinds():
    items = fr.load_items()
    kinds = Counter(it.kind for it in items)
    assert len(items) >= 60 and len(kinds) >= 5 and min(kinds.values()) >= 8
    assert len({it.id for it in items}) == len(items)
    for it in items:
        words = len(it.reply.split())
        assert 35 <= words <= 100, (it.id, words)  # 40-120 tokens of a real tokenizer
        assert fr.is_correct(it.reply, it.answers)
        assert not fr.is_correct(it.filler_reply + " " + it.question, it.answers)
    # several distinct fillers and no repeated question
    assert len({it.filler_user for it in items}) >= 8 and len({it.question for it in items}) == len(items)


def test_shipped_set_shares_no_names_or_templates_with_the_training_generator():
    """The guard: nothing of `rhea.training.synthetic` (its people, cities, pet names, jobs,
    colours as answers, its question/intro/profile templates, its filler turns) is in the set."""
    items = fr.load_items()
    proper = set(synthetic.NAMES) | set(synthetic.HELD_OUT_NAMES) | set(synthetic.CITIES) | set(synthetic.PET_NAMES)
    vocab = proper | set(synthetic.JOBS) | set(synthetic.PETS) | set(synthetic.COLORS)
    fillers = {u for u, _ in synthetic.FILLER} | {a for _, a in synthetic.FILLER}
    templates = [t for q, a in synthetic.QUESTIONS.values() for t in (q, a)] + synthetic.INTROS + synthetic.PROFILE
    patterns = [re.compile(re.escape(t).replace(re.escape("{name}"), r"\w+").replace(re.escape("{city}"), r"\w+")
                           .replace(re.escape("{job}"), r"\w+").replace(re.escape("{pet}"), r"\w+")
                           .replace(re.escape("{pet_name}"), r"\w+").replace(re.escape("{color}"), r"\w+"))
                for t in templates]
    for it in items:
        text = " ".join([it.user, it.reply, it.filler_user, it.filler_reply, it.question])
        assert not (set(re.findall(r"\b[A-Z][a-z]+\b", text)) & proper), it.id
        assert not any(fr.normalise(a) in {w.lower() for w in vocab} for a in it.answers), it.id
        assert not any(a.lower() in vocab or fr.is_correct(a, vocab) for a in it.answers), it.id
        assert it.filler_user not in fillers and it.filler_reply not in fillers
        assert not any(p.search(s) for p in patterns for s in (it.user, it.reply, it.question)), it.id


@pytest.mark.parametrize("bad,match", [
    ({"kind": "colour"}, "kind"),
    ({"answers": []}, "answers"),
    ({"answers": ["7"]}, "not.*stated|no accepted answer"),
    ({"question": "was the code 4 ?"}, "outside the reply"),
    ({"reply": "  "}, "non-empty"),
])
def test_load_items_rejects_bad_items(tmp_path, bad, match):
    with pytest.raises(fr.FactRecallDataError, match=match):
        fr.load_items(_write(tmp_path / "x.jsonl", [_item(**bad)]))


def test_load_items_rejects_missing_file_bad_json_and_duplicates(tmp_path):
    with pytest.raises(fr.FactRecallDataError, match="does not exist"):
        fr.load_items(tmp_path / "nope.jsonl")
    (tmp_path / "b.jsonl").write_text("{not json\n")
    with pytest.raises(fr.FactRecallDataError, match="not valid JSON"):
        fr.load_items(tmp_path / "b.jsonl")
    with pytest.raises(fr.FactRecallDataError, match="missing field"):
        fr.load_items(_write(tmp_path / "m.jsonl", [{"id": "a"}]))
    with pytest.raises(fr.FactRecallDataError, match="duplicate id"):
        fr.load_items(_write(tmp_path / "d.jsonl", [_item(), _item()]))
    assert issubclass(fr.FactRecallDataError, RheaError)


def test_interleave_kinds_spans_kinds_in_any_prefix():
    items = fr.interleave_kinds(fr.load_items())
    assert len({it.kind for it in items[:6]}) == 6


# ----------------------------------------------------------------------------- statistics
def _rows(spec):
    """spec: {condition: [correct per item]} -> rows."""
    return [{"id": f"i{k}", "kind": fr.KINDS[k % 6], "condition": c, "correct": bool(v), "answer": ""}
            for c, vals in spec.items() for k, v in enumerate(vals)]


def test_wilson_interval():
    assert all(fr.wilson(k, n)[0] <= k / n <= fr.wilson(k, n)[1] for n in (1, 7, 24) for k in range(n + 1))
    lo, hi = fr.wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    assert fr.wilson(0, 20)[0] == 0.0 and fr.wilson(20, 20)[1] == 1.0


def test_criterion_pass_and_fail():
    ok = fr.summarise(_rows({"raw": [1] * 10, "latent": [1] * 7 + [0] * 3, "dropped": [1] * 2 + [0] * 8}))
    assert ok["criterion"]["passed"] is True
    assert ok["accuracy"]["latent"]["accuracy"] == 0.7
    p = ok["paired"]["latent_vs_dropped"]
    assert p["n"] == 10 and p["diff"] == pytest.approx(0.5) and p["diff_ci"][0] <= 0.5 <= p["diff_ci"][1]
    assert ok["paired"]["latent_vs_raw"]["ratio"] == pytest.approx(0.7)
    # latent well above dropped but under 0.6 x raw
    low = fr.summarise(_rows({"raw": [1] * 10, "latent": [1] * 5 + [0] * 5, "dropped": [0] * 10}))
    assert low["criterion"]["passed"] is False and low["criterion"]["latent_ge_0.6_raw"] is False
    # latent at 0.6 x raw but within 0.25 of dropped
    near = fr.summarise(_rows({"raw": [1] * 10, "latent": [1] * 8 + [0] * 2, "dropped": [1] * 6 + [0] * 4}))
    assert near["criterion"]["passed"] is False and near["criterion"]["latent_ge_dropped_plus_0.25"] is False
    assert fr.summarise(_rows({"raw": [1, 0]}))["criterion"]["passed"] is None


def test_complete_rows_drops_part_answered_items():
    rows = _rows({"raw": [1, 1], "latent": [1, 0], "dropped": [0]})
    assert {r["id"] for r in fr.complete_rows(rows)} == {"i0"}


# ----------------------------------------------------------------------------- on a tiny model
def test_plans_put_the_reply_in_the_right_form():
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    item = fr.FactItem(**{**_item(), "answers": ("4",)})
    raw, lat, drop = (fr.plan_for(item, c, model) for c in ("raw", "latent", "dropped"))
    assert item.reply in str(raw.messages) and item.reply not in str(lat.messages) + str(drop.messages)
    assert len(lat.latents()) == 1 and not drop.latents() and not raw.latents()
    assert all(item.filler_reply in str(p.messages) and item.question in str(p.messages) for p in (raw, lat, drop))
    with pytest.raises(fr.FactRecallDataError):
        fr.plan_for(item, "sideways", model)
    row = fr.answer_item(model, item, "latent", max_new_tokens=3)
    assert row["condition"] == "latent" and isinstance(row["correct"], bool) and row["prompt_tokens"] > 0


def test_latent_other_keeps_the_user_turn_and_puts_another_replys_latents_in_place():
    import torch

    from rhea.testing import tiny_rhea

    model = tiny_rhea().eval()
    item = fr.FactItem(**{**_item(), "answers": ("4",)})
    other = fr.FactItem(**{**_item(id="o", reply="the colour is teal and that is all ."), "answers": ("teal",)})
    own, ctrl = fr.plan_for(item, "latent", model), fr.plan_for(item, "latent_other", model, other)
    assert item.user in str(ctrl.messages) and item.reply not in str(ctrl.messages)
    with torch.no_grad():
        want = model.compress([other.reply])[0]
    assert torch.equal(ctrl.latents()[0].vectors, want) and not torch.equal(own.latents()[0].vectors, want)
    with pytest.raises(fr.FactRecallDataError, match="another item"):
        fr.plan_for(item, "latent_other", model)
    with pytest.raises(fr.FactRecallDataError, match="another item"):
        fr.plan_for(item, "latent_other", model, item)
    row = fr.score_item(model, item, "latent_other", other=other)
    assert row["condition"] == "latent_other" and row["answer_logprob"] <= 0


def _bench():
    module = load_script(SCRIPT)
    return module


def test_benchmark_end_to_end_on_a_tiny_model_and_resumes(tmp_path, capsys, monkeypatch):
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo
    from rhea.testing import tiny_rhea

    loaded = []
    monkeypatch.setattr(zoo, "check_model_path", lambda name: None)
    monkeypatch.setattr(loading, "load_rhea_model",
                        lambda name, device=None: loaded.append((name, str(device))) or tiny_rhea())
    data = _write(tmp_path / "set.jsonl", [_item(id="a"), _item(id="b", kind="number"), _item(id="c", kind="date")])
    out = tmp_path / "res" / "fr"
    argv = ["--model", "tiny", "--data", str(data), "--max-new-tokens", "2", "--out", str(out)]
    assert _bench().main(argv) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["n_items"] == 3 and set(res["accuracy"]) == {"raw", "latent", "dropped"}
    assert res["criterion"]["passed"] in (True, False) and out.with_suffix(".png").stat().st_size > 0
    assert capsys.readouterr().out.strip().splitlines()[-1].split()[0] in ("PASS", "FAIL")
    n_rows = len((tmp_path / "res" / "fr.rows.jsonl").read_text().splitlines())
    assert n_rows == 9
    assert _bench().main(argv) == 0  # resumes: nothing left to answer, no model loaded
    assert loaded == [("tiny", "cpu")]  # --device cpu by default
    assert res["device"] == "cpu"
    assert "0 answers to generate" in capsys.readouterr().out
    assert len((tmp_path / "res" / "fr.rows.jsonl").read_text().splitlines()) == n_rows
    # summarising the rows again keeps the command that generated them
    assert _bench().main(["--summarise-only", "--data", str(data), "--out", str(out)]) == 0
    again = json.loads(out.with_suffix(".json").read_text())
    assert again["command"] == res["command"] and "--summarise-only" in again["summarised_by"]
    assert again["max_new_tokens"] == 2  # the generating run's setting, not the summary's default
    # a raw-only run of the same items: accuracy for raw, no verdict without latent and dropped
    assert _bench().main(argv[:-1] + [str(tmp_path / "raw"), "--conditions", "raw", "--limit", "2"]) == 0
    raw_only = json.loads((tmp_path / "raw.json").read_text())
    assert list(raw_only["accuracy"]) == ["raw"] and raw_only["n_items"] == 2
    assert raw_only["criterion"]["passed"] is None and "N/A" in capsys.readouterr().out


def test_benchmark_writes_fact_recall_into_the_fidelity(tmp_path, monkeypatch, capsys):
    """--write-fidelity records raw / latent / dropped in the adapters' rhea_config.json (kept by a later
    reconstruction --write-fidelity), after checking the directory before any model loads."""
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo
    from rhea.modeling.config import RheaConfig
    from rhea.testing import tiny_rhea

    monkeypatch.setattr(zoo, "check_model_path", lambda name: None)
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, device=None: tiny_rhea())
    data = _write(tmp_path / "set.jsonl", [_item(id="a"), _item(id="b", kind="number")])
    adapters = tmp_path / "adapters"
    argv = ["--model", "tiny", "--data", str(data), "--max-new-tokens", "2", "--out", str(tmp_path / "fr"),
            "--write-fidelity", str(adapters)]
    with pytest.raises(RheaError, match="has no rhea_config.json"):
        _bench().main(argv)
    adapters.mkdir()
    RheaConfig(base_model="m").save(adapters)
    with pytest.raises(RheaError, match="records no reconstruction fidelity"):
        _bench().main(argv)
    assert not (tmp_path / "fr.rows.jsonl").exists()  # refused before answering anything
    with pytest.raises(RheaError, match="--mode generate"):
        _bench().main(argv + ["--limit", "1"])
    fid = {"reconstruction_token_acc": 0.95, "control_gap": 0.3, "measured_on": "x", "n": 144}
    RheaConfig(base_model="m", fidelity=fid).save(adapters)
    assert _bench().main(argv) == 0
    cfg = RheaConfig.load(adapters)
    res = json.loads((tmp_path / "fr.json").read_text())
    facts = cfg.fidelity["fact_recall"]
    assert {k: facts[k] for k in ("latent", "raw", "dropped")} == {
        k: round(res["accuracy"][k]["accuracy"], 4) for k in ("latent", "raw", "dropped")}
    assert facts["n"] == 2 and "benchmarks/fact_recall.py" in facts["measured_on"]
    saved = json.loads((adapters / "rhea_config.json").read_text())
    assert saved["extra"]["active_mode"]["reason"] == cfg.active_mode()["reason"]
    assert "Fact recall" in (adapters / "README.md").read_text()


def test_benchmark_validates_before_loading(tmp_path):
    with pytest.raises(fr.FactRecallDataError):
        _bench().main(["--model", "nope", "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")])
    with pytest.raises(RheaError):
        _bench().main(["--model", "no-such-model", "--out", str(tmp_path / "o")])
    with pytest.raises(RheaError, match="--conditions"):
        _bench().main(["--model", "nope", "--conditions", "raw,sideways", "--out", str(tmp_path / "o")])
    if not torch.cuda.is_available():  # a device the machine lacks: named, before any weights load
        from rhea.errors import DeviceError

        with pytest.raises(DeviceError, match="cuda"):
            _bench().main(["--model", "smollm2-135m", "--device", "cuda:0", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o.json").exists()


def test_cloze_form_blanks_the_fact_in_its_own_sentence_and_keeps_the_rest():
    it = fr.FactItem("x", "number", "How tall?", "Good choice. The shelf is 182 centimetres tall. It is oak.",
                     "Hi?", "Hello.", "How tall was the shelf?", ("182", "one hundred eighty-two"))
    c = fr.cloze_form(it)
    assert c.question.endswith('"The shelf is ____ centimetres tall."') and "182" not in c.question
    assert (c.id, c.reply, c.answers, c.turns()) == (it.id, it.reply, it.answers, it.turns())
    # an answer that only matches inside a longer number is not a span; one stated twice in its sentence gives it away
    with pytest.raises(fr.FactRecallDataError, match="verbatim"):
        fr.cloze_form(fr.FactItem("y", "number", "u", "It costs 1820 euros.", "f", "g", "q", ("182",)))
    with pytest.raises(fr.FactRecallDataError, match="twice"):
        fr.cloze_form(fr.FactItem("z", "number", "u", "Take 182, yes 182, today.", "f", "g", "q", ("182",)))


def test_every_shipped_item_has_a_cloze_form():
    assert all("____" in fr.cloze_form(it).question for it in fr.load_items())


def test_benchmark_cloze_form_records_it_and_refuses_to_mix_forms(tmp_path, monkeypatch):
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo
    from rhea.testing import tiny_rhea

    monkeypatch.setattr(zoo, "check_model_path", lambda name: None)
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, device=None: tiny_rhea())
    data = _write(tmp_path / "set.jsonl", [_item(id="a"), _item(id="b", kind="number")])
    out = tmp_path / "fr"
    argv = ["--model", "tiny", "--data", str(data), "--max-new-tokens", "2", "--out", str(out), "--conditions", "latent"]
    assert _bench().main(argv + ["--question-form", "cloze"]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["question_form"] == "cloze" and all(r["question_form"] == "cloze" for r in res["rows"])
    with pytest.raises(RheaError, match="--question-form"):
        _bench().main(argv)  # the same rows asked the default way: refused, nothing appended
    assert len((tmp_path / "fr.rows.jsonl").read_text().splitlines()) == 2


def test_teacher_forced_score_agrees_with_greedy_decoding():
    """All answer tokens argmax (teacher-forced) <=> pure greedy decoding writes the answer: the same rendered
    prompt, latents and adapter path as `answer_item`, so the two modes measure the same model."""
    import dataclasses

    import torch

    from rhea.context.rendering import render
    from rhea.testing import tiny_rhea

    torch.manual_seed(0)
    model = tiny_rhea().eval()
    base = fr.FactItem("t", "code", "what is the code ?", "the code is 4 and that is it .", "what is blue ?",
                       "blue is a color .", "what was the code ?", ("4",))
    checked = 0
    for condition in ("raw", "latent", "dropped"):
        r = render(fr.plan_for(base, condition, model), model.tokenizer)
        out = model.generate(r.input_ids, latent_embeds=r.latent_embeds, prefix_len=torch.tensor([r.prefix_len]),
                             max_new_tokens=3, do_sample=False, repetition_penalty=1.0)  # pure greedy
        new = out[0, r.input_ids.shape[1]:].tolist()
        text = model.tokenizer.decode(new)
        if model.tokenizer(text, add_special_tokens=False)["input_ids"] != new:
            continue  # the tiny tokenizer does not round-trip these ids as text
        checked += 1
        hit = fr.score_item(model, dataclasses.replace(base, answers=(text,)), condition)
        assert hit["correct"] and hit["answer_token_acc"] == 1.0 and hit["answer_tokens"] == len(new)
        assert hit["answer_logprob"] <= 0 and hit["condition"] == condition
        other = next(t for t in range(5, 50) if t != new[0])
        miss = fr.score_item(model, dataclasses.replace(base, answers=(model.tokenizer.decode([other] + new[1:]),)),
                             condition)
        assert not miss["correct"] and miss["answer_logprob"] < hit["answer_logprob"]
    assert checked >= 1


def test_benchmark_teacher_forced_mode_summarises_log_probabilities(tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo
    from rhea.testing import tiny_rhea

    monkeypatch.setattr(zoo, "check_model_path", lambda name: None)
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, device=None: tiny_rhea())
    data = _write(tmp_path / "set.jsonl", [_item(id="a"), _item(id="b", kind="number"), _item(id="c", kind="date")])
    out = tmp_path / "tf"
    argv = ["--model", "tiny", "--data", str(data), "--out", str(out), "--mode", "teacher-forced",
            "--conditions", "raw,latent,dropped,latent_other"]
    assert _bench().main(argv) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    lp = res["answer_logprob"]
    assert res["mode"] == "teacher-forced" and set(lp) >= {"raw", "latent", "dropped", "latent_other",
                                                           "latent_minus_dropped", "latent_minus_latent_other"}
    assert res["paired"]["latent_vs_latent_other"]["n"] == 3
    assert lp["latent"]["n"] == 3 and lp["latent"]["mean_logprob_ci"][0] <= lp["latent"]["mean_logprob"] <= 0
    assert "log-prob diff" in capsys.readouterr().out
    # the same rows against themselves: the paired change is zero, recorded and printed
    assert _bench().main(["--summarise-only", "--data", str(data), "--out", str(out), "--mode", "teacher-forced",
                          "--versus", str(out)]) == 0
    versus = json.loads(out.with_suffix(".json").read_text())["versus"]
    assert versus["run"] == str(out) and versus["latent_minus_latent_other"]["n"] == 3
    assert versus["latent"]["change"] == 0.0 and "change from" in capsys.readouterr().out
    with pytest.raises(RheaError, match="no rows"):
        _bench().main(argv + ["--versus", str(tmp_path / "nothing")])
    with pytest.raises(RheaError, match="--mode"):
        _bench().main(argv[:-4])  # generated answers into teacher-forced rows: refused


def test_compare_runs_pairs_items_and_measures_the_change():
    def rows(latent, other):
        return [r for i, (a, b) in enumerate(zip(latent, other))
                for r in ({"id": str(i), "condition": "latent", "answer_logprob": a},
                          {"id": str(i), "condition": "latent_other", "answer_logprob": b})]

    before = rows([-4.0, -3.0, -5.0, -4.0], [-5.0, -5.0, -5.0, -5.0])
    after = rows([-3.0, -2.0, -4.0, -3.5], [-5.0, -5.0, -5.0, -5.5])
    out = fr.compare_runs(before, after)
    assert out["latent"]["n"] == 4 and out["latent"]["change"] == pytest.approx(0.875)
    assert out["latent_minus_latent_other"]["change"] == pytest.approx(1.0)  # +0.875 latent, -0.125 other
    assert out["latent"]["ci"][0] <= 0.875 <= out["latent"]["ci"][1] and 0 < out["latent"]["p"] <= 1
    assert out["measure"] == "answer_logprob"
    with pytest.raises(fr.FactRecallDataError, match="share no"):
        fr.compare_runs(before, [{"id": "x", "condition": "raw", "answer_logprob": -1.0}])


def test_compare_runs_on_generated_rows_pairs_right_answers_and_refuses_mixed_modes():
    """Greedy runs (no log-probabilities) compare whether each item was answered right; a greedy run is not
    compared with a teacher-forced one (--versus on two generated runs once raised KeyError)."""
    def rows(correct):
        return [{"id": str(i), "condition": "latent", "correct": c} for i, c in enumerate(correct)]

    out = fr.compare_runs(rows([False, False, True, False]), rows([True, True, True, False]))
    assert out["measure"] == "correct" and out["latent"]["n"] == 4 and out["latent"]["change"] == pytest.approx(0.5)
    assert "latent_minus_latent_other" not in out
    with pytest.raises(fr.FactRecallDataError, match="differently"):
        fr.compare_runs(rows([True]), [{"id": "0", "condition": "latent", "answer_logprob": -1.0}])


def test_reconstruct_item_scores_the_fact_tokens_apart_from_the_rest():
    """--mode reconstruct: the reply rebuilt from latents under the training's auto-encoding prompt, the tokens
    that spell the fact scored apart; checked against a direct forward pass over the same ids."""
    import torch

    from rhea.constants import AUTOENCODE_PROMPT
    from rhea.context import ContextPlan, Latent
    from rhea.context.rendering import render
    from rhea.testing import tiny_rhea
    from rhea.training import losses

    assert losses.AUTOENCODE_PROMPT is AUTOENCODE_PROMPT  # what the compressor trains on
    torch.manual_seed(0)
    model = tiny_rhea().eval()
    item = fr.FactItem(**{**_item(reply="the code is 4417 and that is it ."), "answers": ("4417",)})
    other = fr.FactItem(**{**_item(id="o", reply="the colour is teal and that is all ."), "answers": ("teal",)})
    own = fr.reconstruct_item(model, item, "latent")
    ctrl = fr.reconstruct_item(model, item, "latent_other", other=other)
    enc = model.tokenizer(item.reply, add_special_tokens=False, return_offsets_mapping=True)
    start = item.reply.index("4417")
    fact = [start < e and s < start + 4 for s, e in enc["offset_mapping"]]
    assert own["answer"] == "4417" and own["answer_tokens"] == sum(fact) >= 1
    assert own["reply_tokens"] == len(enc["input_ids"]) > own["answer_tokens"]
    # the same numbers from one forward pass over prompt + reply
    with torch.no_grad():
        latent = model.compress([item.reply])[0]
    r = render(ContextPlan([{"role": "user", "content": [Latent(latent, 0), "\n" + AUTOENCODE_PROMPT]}]), model.tokenizer)
    ids = torch.cat([r.input_ids, torch.tensor([enc["input_ids"]])], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, latent_embeds=r.latent_embeds, prefix_len=torch.tensor([r.prefix_len])).logits
    logp = torch.log_softmax(logits[0, r.input_ids.shape[1] - 1:-1].float(), -1)
    gold = torch.tensor(enc["input_ids"])
    per_token = logp.gather(1, gold[:, None])[:, 0]
    mask = torch.tensor(fact)
    assert own["answer_logprob"] == pytest.approx(float(per_token[mask].mean()), abs=1e-5)
    assert own["rest_logprob"] == pytest.approx(float(per_token[~mask].mean()), abs=1e-5)
    assert ctrl["answer_logprob"] != own["answer_logprob"]  # another reply's latents
    with pytest.raises(fr.FactRecallDataError, match="cannot be reconstructed"):
        fr.reconstruct_item(model, item, "raw")
    with pytest.raises(fr.FactRecallDataError, match="another item"):
        fr.reconstruct_item(model, item, "latent_other")


def test_benchmark_reconstruct_mode_reports_fact_and_other_tokens(tmp_path, monkeypatch, capsys):
    import rhea.modeling.loading as loading
    import rhea.modeling.zoo as zoo
    from rhea.testing import tiny_rhea

    monkeypatch.setattr(zoo, "check_model_path", lambda name: None)
    monkeypatch.setattr(loading, "load_rhea_model", lambda name, device=None: tiny_rhea())
    data = _write(tmp_path / "set.jsonl", [_item(id="a"), _item(id="b", kind="number"), _item(id="c", kind="date")])
    out = tmp_path / "recon"
    assert _bench().main(["--model", "tiny", "--data", str(data), "--out", str(out), "--mode", "reconstruct"]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    lp = res["answer_logprob"]
    assert res["mode"] == "reconstruct" and set(res["accuracy"]) == {"latent", "latent_other"}
    assert lp["latent_minus_latent_other"]["n"] == 3 and lp["rest_latent_minus_latent_other"]["n"] == 3
    assert 0 <= lp["latent"]["rest_token_acc"] <= 1 and "other reply tokens" in capsys.readouterr().out
    with pytest.raises(RheaError, match="with --mode reconstruct"):
        _bench().main(["--model", "tiny", "--data", str(data), "--out", str(tmp_path / "x"), "--mode", "reconstruct",
                       "--conditions", "raw,latent"])


def test_repeat_form_asks_the_reply_back_by_its_user_message():
    it = fr.load_items()[0]
    q = fr.question_form(it, "repeat").question
    assert q.startswith("Repeat word for word") and it.user in q
    # no shipped item's user message gives its answer away
    assert not any(fr.is_correct(fr.repeat_form(x).question, x.answers) for x in fr.load_items())
    assert fr.question_form(it, "item") is it and "____" in fr.question_form(it, "cloze").question
    with pytest.raises(fr.FactRecallDataError, match="question form 'sideways'"):
        fr.question_form(it, "sideways")
