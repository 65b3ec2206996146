import random

import pytest

from rhea.eval.checkers import (SAMPLEABLE, InstructionArgumentError, InstructionSpec,
                                UnknownInstructionError, UnsupportedInstructionError,
                                conflicts, count_words, detect_language, get_instruction,
                                list_instructions, sample_compatible, split_sentences)

# id -> (kwargs, replies that follow it, replies that break it)
CASES = {
    "start_letter": ({"letter": "B"}, ["Bananas are yellow.", '  "bright day"'],
                     ["Apples are red.", ""]),
    "start_word": ({"word": "Indeed"}, ["Indeed, it is.", "**Indeed** so.", "indeed yes"],
                   ["Indeedy do.", "Yes, indeed."]),
    "start_emoji": ({"emoji": "🚀"}, ["🚀 Launching now.", "\n🚀"], ["Launch 🚀", "🙂 hi"]),
    "repeat_prompt": ({"prompt_to_repeat": "Write a poem."},
                      ["Write a poem. Roses are red.", "write a poem. ok"],
                      ["Here is a poem: Write a poem."]),
    "end_phrase": ({"end_phrase": "Any other questions?"},
                   ["Done. Any other questions?", '"Done. any other questions?"'],
                   ["Any other questions? Done.", "Done."]),
    "quotation": ({}, ['"Wrapped."', '  "a" and "b"  '], ["Not wrapped.", '"half', '"']),
    "word_count": ({"relation": "at most", "num_words": 3}, ["One two three.", "Hi."],
                   ["One two three four."]),
    "sentence_count": ({"relation": "less than", "num_sentences": 3},
                       ["Dr. Smith came. He left.", "One sentence only."],
                       ["One. Two. Three.", "A! B? C."]),
    "paragraph_count": ({"num_paragraphs": 2}, ["First.\n***\nSecond.", "***\nA\n***\nB"],
                        ["Only one.", "A\n***\n\n***\nB", "A\n***\nB\n***\nC"]),
    "nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "However"},
        ["Intro text.\n\nHowever, more.", "A.\n\n\"However\" b."],
        ["Intro.\n\nBut however.", "However.\n\nx\n\ny"]),
    "lowercase": ({}, ["all lower case here.", "numbers 123 ok"], ["Capital here.", "1234"]),
    "uppercase": ({}, ["ALL CAPS HERE.", "OK 123"], ["NOT quite.", "..."]),
    "capital_word_frequency": ({"capital_relation": "at least", "capital_frequency": 2},
                               ["NASA and ESA agree.", "I SAID NO"], ["Only NASA here."]),
    "json_format": ({}, ['{"a": 1}', '```json\n{"a": [1, 2]}\n```', "[1, 2]"],
                    ["{'a': 1}", "Here: {\"a\": 1}", ""]),
    "bullet_count": ({"num_bullets": 2}, ["* one\n* two", "- one\n- two\nend"],
                     ["* one", "* a\n* b\n- c", "**bold** line\n* one"]),
    "title": ({}, ["<<My Title>>\nBody", "x <<t>> y"], ["<< >> body", "<My Title>", "<<a\nb>>"]),
    "highlight_count": ({"num_highlights": 2}, ["*one* and *two*", "**bold** and *it*"],
                        ["*one* only", "* * empty"]),
    "section_count": ({"section_spliter": "Section", "num_sections": 2},
                      ["Section 1\nA\nSection 2\nB", "Section 1 a Section 2 b Section 3 c"],
                      ["Section 1\nonly", "Part 1 Part 2"]),
    "two_responses": ({}, ["First answer.\n******\nSecond answer.", "A ****** B ******"],
                      ["Same ****** Same", "Just one.", "A ****** ****** B"]),
    "constrained_response": ({}, ["My answer is yes.", "Well... My answer is maybe."],
                             ["Yes.", "my answer is yes."]),
    "placeholder_count": ({"num_placeholders": 2}, ["[name] lives at [address].", "[a][b]"],
                          ["[name] only.", "no placeholders"]),
    "postscript": ({"postscript_marker": "P.S."}, ["Body.\nP.S. See you.", "Body\np. s. hi"],
                   ["Body.", "Body. PS hi"]),
    "include_keywords": ({"keywords": ["river", "Stone"]}, ["The River and the stone.",
                                                           "stones by riverside"],
                         ["Only a river.", "Rock and water."]),
    "exclude_keywords": ({"forbidden_words": ["very", "really"]},
                         ["It is quite good.", "Everything is fine."],
                         ["It is very good.", "REALLY?"]),
    "keyword_frequency": ({"keyword": "tea", "relation": "at least", "frequency": 2},
                          ["Tea, then more tea.", "tea tea tea"], ["One tea.", "coffee"]),
    "letter_frequency": ({"letter": "z", "let_relation": "less than", "let_frequency": 2},
                         ["A lazy cat.", "no such letter"], ["Zany zebra.", "zzz"]),
    "no_comma": ({}, ["No commas here.", ""], ["One, two.", "a,b"]),
    "response_language": ({"language": "fr"},
                          ["Le chat est sur la table et il dort dans la maison.",
                           "Je pense que c'est une bonne idée pour les enfants."],
                          ["The cat is on the table and it sleeps.", "12345", ""]),
}


def test_every_instruction_has_cases():
    assert set(CASES) == set(list_instructions())


@pytest.mark.parametrize("inst_id", sorted(CASES))
def test_positive_and_negative(inst_id):
    kwargs, good, bad = CASES[inst_id]
    inst = get_instruction(inst_id)
    for reply in good:
        assert inst.check(reply, **kwargs), f"{inst_id} should accept {reply!r}"
    for reply in bad:
        assert not inst.check(reply, **kwargs), f"{inst_id} should reject {reply!r}"


@pytest.mark.parametrize("inst_id", sorted(CASES))
def test_phrases_name_the_parameters(inst_id):
    kwargs, _, _ = CASES[inst_id]
    inst = get_instruction(inst_id)
    phrase, revoke = inst.phrase(**kwargs), inst.revoke_phrase(**kwargs)
    assert phrase and revoke and phrase != revoke
    for value in kwargs.values():
        if isinstance(value, (str, int)) and inst_id not in ("response_language",):
            assert str(value) in phrase
    if inst_id == "response_language":
        assert "French" in phrase and "French" in revoke


@pytest.mark.parametrize("inst_id", SAMPLEABLE)
def test_sample_kwargs_is_seeded_and_valid(inst_id):
    inst = get_instruction(inst_id)
    first = inst.sample_kwargs(random.Random(7))
    assert first == inst.sample_kwargs(random.Random(7))
    inst.validate(first)
    assert isinstance(inst.check("Some reply.", **first), bool)


def test_task_bound_instruction_cannot_be_sampled():
    with pytest.raises(InstructionArgumentError, match="prompt_to_repeat"):
        get_instruction("repeat_prompt").sample_kwargs(random.Random(0))


def test_unknown_id_and_bad_kwargs_are_named():
    with pytest.raises(UnknownInstructionError, match="'start_with'.*start_word"):
        get_instruction("start_with")
    with pytest.raises(InstructionArgumentError, match="num_words=-3"):
        InstructionSpec("word_count", {"relation": "at most", "num_words": -3})
    with pytest.raises(InstructionArgumentError, match="relation='about'"):
        InstructionSpec("word_count", {"relation": "about", "num_words": 3})
    with pytest.raises(InstructionArgumentError, match="missing \\['word'\\]"):
        InstructionSpec("start_word", {})
    with pytest.raises(UnsupportedInstructionError, match="language='xx'"):
        InstructionSpec("response_language", {"language": "xx"})
    assert issubclass(InstructionArgumentError, ValueError)


def test_spec_roundtrip_and_key():
    spec = InstructionSpec("include_keywords", {"keywords": ["a", "b"]})
    assert InstructionSpec.from_dict(spec.to_dict()) == spec
    assert hash(InstructionSpec.from_dict(spec.to_dict())) == hash(spec)
    assert spec.key == "include_keywords(keywords=['a', 'b'])"


@pytest.mark.parametrize("text,lang", [
    ("The weather is nice today and we are going to the park.", "en"),
    ("Das Wetter ist heute schön und wir gehen in den Park.", "de"),
    ("El clima es agradable hoy y vamos al parque con los niños.", "es"),
    ("O tempo está bom hoje e vamos ao parque com as crianças.", "pt"),
    ("Сегодня хорошая погода, и мы идём в парк.", "ru"),
    ("आज मौसम अच्छा है और हम पार्क में जा रहे हैं।", "hi"),
    ("今日はいい天気ですね。", "ja"), ("今天天气很好。", "zh"), ("오늘 날씨가 좋네요.", "ko"),
    ("วันนี้อากาศดี", "th"), ("Xyzzy plugh.", None), ("", None),
])
def test_detect_language(text, lang):
    assert detect_language(text) == lang


def test_text_helpers():
    assert count_words("Don't stop-now, 3 times.") == 6  # \w+ splits "don't" and "stop-now"
    assert split_sentences("Line one\nLine two. Three?") == ["Line one", "Line two.", "Three?"]
    assert split_sentences("It costs 3.50 e.g. today. Fine.") == ["It costs 3.50 e.g. today.",
                                                                  "Fine."]


def test_conflicts_and_compatible_sampling():
    assert conflicts(InstructionSpec("start_word", {"word": "A"}),
                     InstructionSpec("start_emoji", {"emoji": "🙂"}))
    assert conflicts(InstructionSpec("json_format"), InstructionSpec("postscript",
                                                                     {"postscript_marker": "P.S."}))
    assert conflicts(InstructionSpec("constrained_response"), InstructionSpec("lowercase"))
    assert not conflicts(InstructionSpec("no_comma"), InstructionSpec("lowercase"))
    for seed in range(20):
        specs = sample_compatible(random.Random(seed), 3)
        assert len(specs) == 3
        assert not any(conflicts(a, b) for i, a in enumerate(specs) for b in specs[i + 1:])
    with pytest.raises(InstructionArgumentError, match="n=2"):
        sample_compatible(random.Random(0), 2, ["lowercase", "uppercase"])
