import pytest

from rhea.backends.llm import ScriptedGenerator
from rhea.context import EmptyMessageError
from rhea.memory import (
    HashedNgramClassifier,
    InstructionRecognizer,
    PromptClassifier,
    RecognizerDecision,
    load_labelled,
    precision_recall,
)
from rhea.memory.recognizer import (
    CLASSIFIER_PROMPT,
    cross_validate,
    match_one_off,
    match_rules,
    split_fold,
    trained_classifier,
)


def test_labelled_set_shape():
    rows = load_labelled()
    assert len(rows) >= 300
    assert len({r["text"] for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"text", "label", "kind", "category", "split"}
        assert r["label"] == (r["kind"] != "none") and r["split"] in ("train", "test")
    cats = {r["category"] for r in rows}
    assert {"oneoff", "content-mention", "revoke", "json", "language", "length", "case", "punctuation",
            "greeting", "self-intro", "smalltalk", "greeting+rule", "intro+rule"} <= cats
    test = load_labelled("test")
    assert sum(r["label"] for r in test) >= 25 and sum(1 - r["label"] for r in test) >= 20


def test_held_out_precision_recall():
    test = load_labelled("test")
    rules = precision_recall(InstructionRecognizer(None), test)
    both = precision_recall(InstructionRecognizer("trained"), test)
    print(f"\nrules only: P={rules['precision']:.3f} R={rules['recall']:.3f} {rules['tp']}tp {rules['fp']}fp {rules['fn']}fn")
    print(f"rules+trained: P={both['precision']:.3f} R={both['recall']:.3f} {both['tp']}tp {both['fp']}fp {both['fn']}fn")
    assert both["recall"] >= 0.95, both["errors"]
    assert both["precision"] >= 0.8, both["errors"]
    # the classifier must earn its place: it recovers what the rules miss
    assert both["recall"] > rules["recall"]


@pytest.mark.parametrize("text,kind", [
    ("From now on, answer in French.", "add"),
    ("Keep all your answers under 50 words.", "add"),
    ("Always start your response with 'Of course!'.", "add"),
    ("Never use exclamation marks in your responses.", "add"),
    ("For the rest of this conversation, be a pirate.", "add"),
    ("Stop starting your answers with O.", "revoke"),
    ("Forget the JSON rule.", "revoke"),
    ("You no longer need to answer in French.", "revoke"),
])
def test_rules_fire_on_directives(text, kind):
    d = InstructionRecognizer(None)(text)
    assert (d.is_global, d.kind, d.source) == (True, kind, "rules") and d.matched


@pytest.mark.parametrize("text", [
    "Why do cats always land on their feet?",
    "What does 'from now on' mean in legal contracts?",
    "How do I stop my dog from barking?",
])
def test_rules_stay_quiet_on_hard_negatives(text):
    assert match_rules(text) is None and match_one_off(text) is None
    assert InstructionRecognizer(None)(text) == RecognizerDecision(False, "none", "default")


@pytest.mark.parametrize("text", [
    "Rewrite your previous answer in French.",
    "For this question only, respond in German.",
    "This time, start your answer with a summary.",
    "Summarize the above in three bullet points.",
    # a question and how to answer it: the state-tracking and bAbI probes, which the
    # classifier alone scored 0.47 and 0.61 (global) and so put into the system block
    "Based only on what I told you earlier in this conversation, what is the current value of each of "
    "these: fruit, colour? Answer with one line per item in the form key: value.",
    "Where is Mary? Answer in one word.",
    'Is "ephemeral" a noun? Please just reply yes or no.',
])
def test_one_off_scope_is_decided_by_the_rules(text):
    calls = []
    d = InstructionRecognizer(lambda t: calls.append(t) or 1.0)(text)
    assert (d.is_global, d.source) == (False, "rules") and d.matched and calls == []


@pytest.mark.parametrize("text,kind", [
    ("Hi, I'm planning a trip to Lisbon. From now on, answer in Portuguese.", "add"),
    ("Until I say otherwise, answer in haiku.", "add"),
    ("Talk like a cowboy for the whole conversation.", "add"),
    ("Remember to always cite your sources.", "add"),
    ("From now on answer in French, this time too.", "add"),  # a global cue wins over a one-off cue
    ("Where is Mary? Answer in one word from now on.", "add"),
    ("What is 2+2? Answer in French in all your replies.", "add"),
])
def test_new_rules_fire(text, kind):
    d = InstructionRecognizer(None)(text)
    assert (d.is_global, d.kind, d.source) == (True, kind, "rules")


@pytest.mark.parametrize("text", [
    # the reported false positive; deliberately NOT in the labelled set, so this is out of sample
    "Hi, I'm planning a trip to Lisbon.",
    "Hey! I'm heading to Kyoto in May.",
    "Hello, my name is Priya and I teach maths.",
    "Good morning, how are you?",
])
def test_greetings_and_introductions_are_not_instructions(text):
    assert "Lisbon" not in " ".join(r["text"] for r in load_labelled())
    assert not InstructionRecognizer()(text).is_global


def test_cross_validation_beats_the_paper():
    rows = load_labelled()
    assert {split_fold(r["text"], 5) for r in rows} == set(range(5))
    cv = cross_validate(rows, folds=5)
    assert cv["n"] == len(rows) and cv["tp"] + cv["fn"] == sum(r["label"] for r in rows)
    assert cv["recall"] > 0.89 and cv["precision"] > 0.62, cv  # paper: Qwen3-0.6B, R 0.89, P 0.62
    with pytest.raises(ValueError, match="folds"):
        cross_validate(rows, folds=1)


def test_classifier_runs_only_when_rules_do_not_fire():
    calls = []

    def scorer(text):
        calls.append(text)
        return 0.9

    rec = InstructionRecognizer(scorer)
    assert rec("From now on, be brief.").source == "rules" and calls == []
    d = rec("Talk to me like a pirate.")
    assert (d.is_global, d.kind, d.source, d.confidence) == (True, "add", "classifier", 0.9)
    assert calls == ["Talk to me like a pirate."]


def test_prompted_llm_classifier_gets_yes_no_prompt():
    gen = ScriptedGenerator(["YES", "no", "maybe?"])
    rec = InstructionRecognizer(gen)
    assert isinstance(rec.classifier, PromptClassifier)
    first = rec("Talk to me like a pirate.")
    assert first.is_global and first.matched == "YES"
    assert "Talk to me like a pirate." in gen.calls[0][0]["content"]
    assert "Answer YES or NO." in gen.calls[0][0]["content"]
    assert not rec("What is the capital of Peru?").is_global
    # an unparseable reply counts as YES: a missed instruction costs more than a false alarm
    assert rec("Tell me about whales.").confidence == 0.5


def test_trained_classifier_is_deterministic_and_separates():
    rows = load_labelled("train")
    again = HashedNgramClassifier.fit([r["text"] for r in rows], [r["label"] for r in rows])
    clf = trained_classifier()
    for text in ("Reply to me only in rhymes.", "What is 2+2?"):
        assert again(text) == pytest.approx(clf(text), abs=1e-12)
    assert clf("Please keep replies to a single paragraph.") > clf("What's 17 times 23?")


def test_bad_inputs():
    rec = InstructionRecognizer(None)
    for text in ("", "   \n"):
        with pytest.raises(EmptyMessageError):
            rec(text)
    for threshold in (0.0, 1.0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match="threshold"):
            InstructionRecognizer(None, threshold=threshold)
    with pytest.raises(ValueError, match="classifier"):
        InstructionRecognizer(classifier=42)
    with pytest.raises(ValueError, match="probability"):
        InstructionRecognizer(lambda t: 3.0)("Talk to me like a pirate.")
    with pytest.raises(ValueError, match="split"):
        load_labelled("dev")
    with pytest.raises(ValueError, match="message"):
        PromptClassifier(ScriptedGenerator([]), prompt="no placeholder")
    assert "{message}" in CLASSIFIER_PROMPT


@pytest.mark.parametrize("text", [
    "Where is Mary? Answer in one word. And where was she before?",  # the format is not the last word
    "Answer in French?",  # no question before the request
])
def test_question_scope_rule_needs_a_question_then_the_request(text):
    assert match_one_off(text) is None
