import json
import random

import pytest

from rhea.eval.checkers import (InstructionSpec, UnsupportedInstructionError, adherence,
                                check_ifeval, from_ifeval, from_mt_eval, iar, ifeval_id_map,
                                mean_iar, mt_eval_id_map)

# One line of IFEval's input_data.jsonl, verbatim in format (kwargs parallel to the ids).
IFEVAL_LINE = (
    '{"key": 1000, "prompt": "Write a 300+ word summary of the wikipedia page. Do not use any '
    'commas and highlight at least 3 sections.", "instruction_id_list": '
    '["punctuation:no_comma", "detectable_format:number_highlighted_sections", '
    '"length_constraints:number_words"], "kwargs": [{}, {"num_highlights": 3}, '
    '{"relation": "at least", "num_words": 300}]}'
)


def test_ifeval_line_is_checked_with_our_checkers():
    record = json.loads(IFEVAL_LINE)
    good = "*one* *two* *three* " + "word " * 300
    bad = "*one*, *two* and nothing else"
    result = check_ifeval(record, good)
    assert result == {"results": {"punctuation:no_comma": True,
                                  "detectable_format:number_highlighted_sections": True,
                                  "length_constraints:number_words": True},
                      "unsupported": [], "follow_all": True}
    result = check_ifeval(record, bad)
    assert result["results"] == {"punctuation:no_comma": False,
                                 "detectable_format:number_highlighted_sections": False,
                                 "length_constraints:number_words": False}
    assert result["follow_all"] is False


def test_all_25_ifeval_ids_are_mapped():
    ids = {"punctuation:no_comma", "length_constraints:number_words",
           "length_constraints:number_sentences", "keywords:forbidden_words",
           "detectable_format:number_highlighted_sections", "keywords:frequency",
           "combination:repeat_prompt", "startend:quotation", "change_case:english_lowercase",
           "keywords:existence", "detectable_format:title", "keywords:letter_frequency",
           "detectable_format:number_bullet_lists", "language:response_language",
           "detectable_content:number_placeholders", "length_constraints:number_paragraphs",
           "startend:end_checker", "detectable_content:postscript",
           "change_case:english_capital", "change_case:capital_word_frequency",
           "combination:two_responses", "detectable_format:json_format",
           "detectable_format:multiple_sections", "length_constraints:nth_paragraph_first_word",
           "detectable_format:constrained_response"}
    assert set(ifeval_id_map()) == ids


def test_unknown_ifeval_id_raises_or_is_reported_never_passed():
    record = {"instruction_id_list": ["punctuation:no_comma", "detectable_format:haiku"],
              "kwargs": [{}, {}]}
    with pytest.raises(UnsupportedInstructionError, match="detectable_format:haiku"):
        check_ifeval(record, "fine")
    report = check_ifeval(record, "fine", on_unsupported="report")
    assert report["unsupported"] == ["detectable_format:haiku"]
    assert "detectable_format:haiku" not in report["results"]
    only_unknown = {"instruction_id_list": ["x:y"], "kwargs": [{}]}
    assert check_ifeval(only_unknown, "fine", on_unsupported="report")["follow_all"] is None
    with pytest.raises(ValueError, match="on_unsupported='skip'"):
        check_ifeval(record, "fine", on_unsupported="skip")


def test_ifeval_kwargs_padded_with_none_are_accepted():
    # The Hugging Face copy of IFEval pads every kwargs dict with null keys.
    spec = from_ifeval("startend:end_checker", {"end_phrase": "Peace!", "num_words": None})
    assert spec == InstructionSpec("end_phrase", {"end_phrase": "Peace!"})
    assert spec.check("Goodbye. Peace!")


def test_ifeval_language_code_outside_detector_is_unsupported():
    with pytest.raises(UnsupportedInstructionError, match="'xx'"):
        from_ifeval("language:response_language", {"language": "xx"})
    assert from_ifeval("language:response_language", {"language": "kn"}).check("ಇದು ಕನ್ನಡ ವಾಕ್ಯ")


def test_mismatched_kwargs_length_is_an_error():
    with pytest.raises(ValueError, match="2 instruction ids but 1 kwargs"):
        check_ifeval({"instruction_id_list": ["a:b", "c:d"], "kwargs": [{}]}, "x")


def test_mt_eval_ids_map_with_drawn_parameters():
    assert mt_eval_id_map()["startend:start_char"] == "start_letter"
    spec = from_mt_eval("startend:start_emoji", random.Random(3))
    assert spec == from_mt_eval("startend:start_emoji", random.Random(3))
    assert spec.id == "start_emoji" and spec.check(spec.kwargs["emoji"] + " hi")
    with pytest.raises(UnsupportedInstructionError, match="format:haiku"):
        from_mt_eval("format:haiku", random.Random(0))


def test_iar_is_ten_times_fraction_satisfied():
    specs = [InstructionSpec("no_comma"), InstructionSpec("lowercase"),
             InstructionSpec("start_word", {"word": "indeed"}),
             InstructionSpec("end_phrase", {"end_phrase": "bye."})]
    assert iar(specs, "indeed all good. bye.") == 10.0
    assert iar(specs, "indeed, all good. bye.") == 7.5
    assert iar(specs, "Well, Nothing.") == 0.0
    assert iar([], "anything") is None
    assert adherence(specs[:2], "a, b") == {"no_comma()": False, "lowercase()": True}


def test_mean_iar_skips_turns_without_instructions():
    assert mean_iar([10.0, None, 5.0]) == 7.5
    assert mean_iar([None]) is None
