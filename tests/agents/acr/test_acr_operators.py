"""Operators on hand-built histories: deterministic noise_filter, path_prune, attention_anchor; prompts."""
from __future__ import annotations

import pytest

from rhea.agents.acr import (OPERATORS, ACRConfigError, HistoryTurn, attention_anchor, canonical_operator, noise_filter,
                             path_prune, refactor_prompt)
from rhea.agents.acr.deterministic import relevance_scores
from rhea.backends.embedding import HashingEmbedder

HISTORY = [
    HistoryTurn(0, "My flight to Oslo leaves at 9 from gate B12.", "Noted: gate B12 at 9."),
    HistoryTurn(1, "Why do cats purr?", "Cats purr when content and to soothe themselves."),
    HistoryTurn(2, "How do vaccines work?", "They train the immune system with a harmless antigen."),
    HistoryTurn(3, "Thanks!", "You're welcome."),
]


def test_noise_filter_keeps_relevant_turns_and_the_most_recent():
    sel = noise_filter(HISTORY, "Which gate does my Oslo flight leave from?", tau=0.3)
    assert sel.keep == [0, 3]
    assert sel.notes == {3: "kept as most recent"}
    assert sel.scores[0] == 1.0 and sel.scores[1] < 0.3


def test_noise_filter_tau_and_keep_last_bounds():
    assert noise_filter(HISTORY, "gate Oslo flight", tau=0.0, keep_last=0).keep == [0, 1, 2, 3]
    assert noise_filter(HISTORY, "gate Oslo flight", tau=1.0, keep_last=0).keep == [0]
    with pytest.raises(ACRConfigError, match="tau=1.5"):
        noise_filter(HISTORY, "q", tau=1.5)
    with pytest.raises(ACRConfigError, match="keep_last"):
        noise_filter(HISTORY, "q", keep_last=-1)


def test_noise_filter_with_an_embedding_scorer():
    scores = relevance_scores(HISTORY, "Why do cats purr so much?", scorer="embedding", embedder=HashingEmbedder(256))
    assert max(range(4), key=scores.__getitem__) == 1
    with pytest.raises(ACRConfigError, match="embedder="):
        relevance_scores(HISTORY, "q", scorer="embedding")
    with pytest.raises(ACRConfigError, match="scorer="):
        relevance_scores(HISTORY, "q", scorer="tfidf")


def test_path_prune_drops_repeated_identical_failed_attempts():
    turns = [
        HistoryTurn(0, "Write a regex for a date.", "\\d+"),
        HistoryTurn(1, "Wrong, that matches any number. Try again.", "\\d+"),
        HistoryTurn(2, "Still wrong.", "\\d+"),
        HistoryTurn(3, "Still wrong!", "\\d{4}-\\d{2}-\\d{2}"),
        HistoryTurn(4, "Great, thanks.", "Glad it works."),
    ]
    sel = path_prune(turns)
    assert sel.keep == [0, 3, 4]
    assert sel.notes == {0: "this reply failed 3 times"}


def test_path_prune_leaves_distinct_failures_and_clean_histories_alone():
    distinct = [HistoryTurn(0, "Capital of Australia?", "Sydney"), HistoryTurn(1, "Wrong.", "Melbourne"),
                HistoryTurn(2, "Wrong again.", "Canberra")]
    assert path_prune(distinct).keep == [0, 1, 2]
    assert path_prune(HISTORY).keep == [0, 1, 2, 3]
    assert path_prune([]).keep == []


def test_attention_anchor_restates_instructions_and_recent_constraints():
    turns = [HistoryTurn(0, "From now on answer in French.", "D'accord."),
             HistoryTurn(1, "Keep answers under 20 words and never use emojis.", "Compris."),
             HistoryTurn(2, "Why is the sky blue?", "La diffusion de Rayleigh.")]
    text = attention_anchor(turns, instructions=["From now on answer in French."], task="Chat in French.")
    assert text.splitlines() == ["[KEY INFO]:", "- Task: Chat in French.",
                                 "- Constraints: From now on answer in French. | "
                                 "Keep answers under 20 words and never use emojis."]
    assert attention_anchor([HistoryTurn(0, "Why is the sky blue?", "Rayleigh.")]) == ""


def test_every_refactoring_operator_has_the_papers_prompt_and_none_has_none():
    assert OPERATORS == ("none", "state_abstract", "noise_filter", "fact_rectify", "path_prune", "cognitive_boosting",
                         "attention_anchor")
    for op in OPERATORS[1:]:
        prompt = refactor_prompt(op)
        assert prompt.startswith("Role: You are a precise text processing engine specialized in ")
        for placeholder in ("{task_description}", "{previous_context}", "{history}"):
            assert prompt.count(placeholder) == 1
        assert "Output format: Return only: <summary>" in prompt and prompt.endswith("</summary>")
    assert "[Thought]: ..." in refactor_prompt("cognitive_boosting")
    assert "[KEY INFO]" in refactor_prompt("attention_anchor")
    with pytest.raises(ACRConfigError, match="none keeps"):
        refactor_prompt("none")
    with pytest.raises(ACRConfigError, match="not one of"):
        refactor_prompt("compress")


@pytest.mark.parametrize("old, new", [("state_abstraction", "state_abstract"), ("fact_rectification", "fact_rectify"),
                                      ("cognitive_boost", "cognitive_boosting"), ("NONE", "none")])
def test_pre_27_operator_names_load_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated"):
        assert canonical_operator(old) == new
    with pytest.warns(DeprecationWarning):
        assert "Fact Rectification" in refactor_prompt("fact_rectification")
