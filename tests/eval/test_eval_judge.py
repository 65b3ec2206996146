import pytest

from rhea.backends.llm import ScriptedGenerator
from rhea.errors import RheaConfigError
from rhea.eval.judge import Judge, parse_rating


@pytest.mark.parametrize("text,rating", [
    ("Good answer.\nRating: [[8]]", 8.0),
    ("Rating: [[7.5]]", 7.5),
    ("Rating: [9]", 9.0),  # FastChat's backup pattern
    ("[[3]] at first, but on reflection [[4]]", 3.0),  # the first match wins, as in FastChat
    ("Rating: [[10]]", 10.0),
    ("Rating: 8/10", None),
    ("I would rate it eight.", None),
    ("Rating: [[0]]", None),
    ("Rating: [[11]]", None),
    ("", None),
    ("Rating: [[N/A]]", None),
])
def test_parse_rating(text, rating):
    assert parse_rating(text) == rating


def test_single_answer_prompt_follows_fastchat_format():
    gen = ScriptedGenerator(["Helpful. Rating: [[6]]"])
    verdict = Judge(gen).rate("Why is the sky blue?", "Rayleigh scattering.")
    assert (verdict.rating, verdict.prompt_name, verdict.error) == (6.0, "single-v1", None)
    system, user = gen.calls[0]
    assert system == {"role": "system", "content": "You are a helpful assistant."}
    assert user["content"].startswith("[Instruction]\nPlease act as an impartial judge")
    assert '"[[rating]]", for example: "Rating: [[5]]"' in user["content"]
    assert "[Question]\nWhy is the sky blue?\n\n[The Start of Assistant's Answer]\n" \
           "Rayleigh scattering.\n[The End of Assistant's Answer]" in user["content"]
    assert "Reference Answer" not in user["content"]


def test_reference_and_multi_turn_prompts():
    gen = ScriptedGenerator(["[[9]]", "Wrong second step. [[2]]"])
    judge = Judge(gen)
    assert judge.rate("2+2?", "4", reference="4").prompt_name == "single-math-v1"
    assert "[The Start of Reference Answer]\n4\n[The End of Reference Answer]" in \
        gen.calls[0][1]["content"]
    verdict = judge.rate_multi_turn(("Q1", "Q2"), ("A1", "A2"), references=("R1", "R2"))
    assert (verdict.rating, verdict.prompt_name) == (2.0, "single-math-v1-multi-turn")
    system, user = gen.calls[1]
    assert "second" in system["content"] and "[[rating]]" in system["content"]
    assert "### User:\nQ2\n\n### Assistant A:\nA2" in user["content"]
    assert "### Reference answer:\nR2" in user["content"]


def test_malformed_judge_output_gives_no_rating():
    verdict = Judge(ScriptedGenerator(["I think it is decent."])).rate("Q", "A")
    assert verdict.rating is None
    assert verdict.raw == "I think it is decent."
    assert "no [[rating]]" in verdict.error


def test_judge_validates_its_inputs():
    with pytest.raises(TypeError, match="TextGenerator"):
        Judge(object())
    with pytest.raises(ValueError, match="max_new_tokens=4"):
        Judge(ScriptedGenerator([]), max_new_tokens=4)
    with pytest.raises(ValueError, match="exactly 2 questions"):
        Judge(ScriptedGenerator([])).rate_multi_turn(("Q",), ("A",))


# FastChat judge_prompts.jsonl "single-v1" prompt_template, verbatim (Apache-2.0).
FASTCHAT_SINGLE_V1 = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response "
    "provided by an AI assistant to the user question displayed below. Your evaluation should "
    "consider factors such as the helpfulness, relevance, accuracy, depth, creativity, and level "
    "of detail of the response. Begin your evaluation by providing a short explanation. Be as "
    "objective as possible. After providing your explanation, you must rate the response on a "
    "scale of 1 to 10 by strictly following this format: \"[[rating]]\", for example: "
    "\"Rating: [[5]]\".\n\n[Question]\n{question}\n\n[The Start of Assistant's Answer]\n{answer}\n"
    "[The End of Assistant's Answer]"
)


def test_single_v1_prompt_is_fastchat_verbatim():
    gen = ScriptedGenerator(["[[5]]"])
    Judge(gen).rate("Why?", "Because.")
    assert gen.calls[0][1]["content"] == FASTCHAT_SINGLE_V1.format(question="Why?",
                                                                    answer="Because.")


class _RatingModel:
    """A local-judge stand-in: writes an explanation without a rating, then scores continuations."""

    def __init__(self, best: int):
        from rhea.testing import tiny_tokenizer

        self.tokenizer = tiny_tokenizer(["good", "answer"])
        self.best, self.prompts = best, []

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None):
        return "A good answer, clear and correct."

    def continuation_logprobs(self, prompt, continuations, *, encode=None):
        self.prompts.append(prompt)
        return [0.0 if c == f"{self.best}]]" else -5.0 for c in continuations], 10


def test_a_local_judge_without_a_rating_gives_its_likeliest_completion():
    model = _RatingModel(best=7)
    j = Judge(model).rate("Q?", "A.")
    assert (j.rating, j.source, j.error) == (7.0, "completed", None)
    assert model.prompts[0].endswith("A good answer, clear and correct.\nRating: [[")  # after its own explanation
    off = Judge(_RatingModel(best=7), complete_rating=False).rate("Q?", "A.")
    assert (off.rating, off.source) == (None, "none") and "no [[rating]]" in off.error
    # a rating in the text is read as FastChat reads it, never completed
    assert Judge(ScriptedGenerator(["Fine. Rating: [[4]]"])).rate("Q?", "A.").source == "parsed"


def test_rating_completion_on_a_real_tiny_model():
    from rhea.backends.llm import HFGenerator
    from rhea.testing import tiny_rhea

    j = Judge(HFGenerator(tiny_rhea().eval()), max_new_tokens=16).rate("What is 2+2?", "4")
    assert j.source in ("parsed", "completed") and 1.0 <= j.rating <= 10.0


def test_a_direct_judge_rates_without_an_explanation():
    """explain=False: no text is generated; the rating is the probability-weighted mean of "k]]" right after
    "Rating: [[", the ten probabilities kept."""
    model = _RatingModel(best=3)
    judge = Judge(model, explain=False)
    j = judge.rate("Q?", "A.")
    assert (j.source, j.raw, j.error) == ("direct", "", None) and j.rating == j.expected
    assert model.prompts[0].endswith("Rating: [[")
    assert "A good answer" not in model.prompts[0]  # nothing generated before the rating
    assert abs(sum(j.distribution) - 1) < 1e-9 and max(j.distribution) == j.distribution[2]
    assert 3.0 < j.expected < 5.5 and judge.describe()["explain"] is False  # 3 likeliest, the other nine far behind
    assert "explain" not in Judge(_RatingModel(best=3)).describe()  # the explaining judge's record is unchanged
    with pytest.raises(RheaConfigError, match="explain=False"):
        Judge(ScriptedGenerator(["[[5]]"]), explain=False)


def test_a_direct_judge_on_a_real_tiny_model():
    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import single_request
    from rhea.testing import tiny_rhea

    judge = Judge(HFGenerator(tiny_rhea().eval()), explain=False)
    verdicts = judge.judge_many([single_request("What is 2+2?", "4"), single_request("What is 2+2?", "5")])
    assert [v.source for v in verdicts] == ["direct", "direct"]
    assert all(1.0 <= v.rating <= 10.0 and v.rating == v.expected for v in verdicts)


def test_judge_many_rates_in_order_and_in_chunks(monkeypatch):
    import rhea.eval.judge as judge_module
    from rhea.eval.judge import multi_turn_request, single_request

    sizes = []
    real = judge_module.generate_rows
    monkeypatch.setattr(judge_module, "generate_rows",
                        lambda gens, convs, **kw: sizes.append(len(gens)) or real(gens, convs, **kw))
    gen = ScriptedGenerator([f"[[{k}]]" for k in range(1, 6)])
    requests = [single_request(f"Q{k}?", f"A{k}.") for k in range(4)] + [
        multi_turn_request(("Q1", "Q2"), ("A1", "A2"), references=("R1", "R2"))]
    verdicts = Judge(gen, batch_size=2).judge_many(requests)
    assert [v.rating for v in verdicts] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [v.prompt_name for v in verdicts] == ["single-v1"] * 4 + ["single-math-v1-multi-turn"]
    assert sizes == [2, 2]  # the fifth alone goes through the generator's own generate
    assert gen.calls[0][1]["content"].endswith("A0.\n[The End of Assistant's Answer]")
    with pytest.raises(ValueError, match="batch_size=0"):
        Judge(gen, batch_size=0)


def test_a_batch_of_judgments_equals_one_by_one_on_a_real_tiny_model():
    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import single_request
    from rhea.testing import tiny_rhea

    model = tiny_rhea().eval()
    requests = [single_request("What is 2+2?", "4"), single_request("Name a colour.", "a long answer " * 6),
                single_request("Why?", "Because.", reference="Because it is.")]
    one = [Judge(HFGenerator(model), max_new_tokens=16).judge_many([r])[0] for r in requests]
    many = Judge(HFGenerator(model), max_new_tokens=16).judge_many(requests)
    assert [(v.raw, v.rating, v.source) for v in many] == [(v.raw, v.rating, v.source) for v in one]


@pytest.mark.parametrize("text,label", [
    ('The reply names Lisbon, as the gold does. {"label": "CORRECT"}', 1.0),
    ('It names another city.\n```json\n{"label": "WRONG"}\n```', 0.0),
    ('{"label": "correct"}', 1.0),  # the JSON label in any case
    ('It says CORRECT at first... {"label": "WRONG"}', 0.0),  # the JSON the prompt asks for wins
    ("Same topic, so CORRECT", 1.0),
    ("Different date. WRONG", 0.0),
    ("Not CORRECT but WRONG", None),  # both words and no JSON: mem0's prompt forbids it
    ("The answer is correct.", None),  # a lower-case word in an explanation is not a label
    ("", None),
])
def test_parse_label(text, label):
    from rhea.eval.judge import parse_label

    assert parse_label(text) == label


def test_the_correctness_judge_sends_locomos_prompt_and_reads_its_label():
    from rhea.eval.judge import CORRECTNESS_PROMPT, LABEL_SCALE, correctness_request

    gen = ScriptedGenerator(['Both name Lisbon. {"label": "CORRECT"}', "It names Porto. WRONG", "Unsure."])
    judge = Judge(gen, complete_rating=False)
    verdicts = [judge.correctness("Which city did I fly to?", "Lisbon", "You flew to Lisbon."),
                judge.correctness("Which city did I fly to?", "Lisbon", "Porto."),
                judge.correctness("Which city did I fly to?", "Lisbon", "Hmm.")]
    assert [(v.rating, v.prompt_name, v.source) for v in verdicts[:2]] == [
        (1.0, "locomo-correctness", "parsed"), (0.0, "locomo-correctness", "parsed")]
    assert verdicts[2].rating is None and "no CORRECT / WRONG label" in verdicts[2].error
    # one user message, as mem0's evaluation sends it: the question, the gold answer and the reply, nothing else
    (message,) = gen.calls[0]
    assert message == {"role": "user", "content": CORRECTNESS_PROMPT.format(
        question="Which city did I fly to?", gold_answer="Lisbon", generated_answer="You flew to Lisbon.")}
    assert "be generous with your grading" in CORRECTNESS_PROMPT and 'the key as "label"' in CORRECTNESS_PROMPT
    assert correctness_request("q", "g", "a").scale == LABEL_SCALE


class _LabelModel(_RatingModel):
    """A local-judge stand-in that writes no label and finds `best` ("CORRECT" or "WRONG") likelier."""

    def continuation_logprobs(self, prompt, continuations, *, encode=None):
        self.prompts.append(prompt)
        return [0.0 if c.startswith(self.best) else -2.0 for c in continuations], 10


def test_a_local_correctness_judge_completes_or_reads_its_label_from_probabilities():
    model = _LabelModel(best="WRONG")
    j = Judge(model).correctness("Q?", "gold", "answer")
    assert (j.rating, j.source) == (0.0, "completed") and model.prompts[0].endswith('clear and correct.\n{"label": "')
    assert j.expected < 0.5 and abs(sum(j.distribution) - 1) < 1e-9
    direct = Judge(_LabelModel(best="CORRECT"), explain=False).correctness("Q?", "gold", "answer")
    assert (direct.rating, direct.source, direct.raw) == (1.0, "direct", "") and 0.5 < direct.expected < 1.0


def test_a_correctness_judgment_on_a_real_tiny_model():
    from rhea.backends.llm import HFGenerator
    from rhea.testing import tiny_rhea

    judge = Judge(HFGenerator(tiny_rhea().eval()), max_new_tokens=16)
    for verdict in (judge.correctness("Which city?", "Lisbon", "Lisbon"),
                    Judge(judge.generator, explain=False).correctness("Which city?", "Lisbon", "Lisbon")):
        assert verdict.rating in (0.0, 1.0) and 0.0 <= verdict.expected <= 1.0
