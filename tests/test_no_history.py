"""Reader-facing text speaks of the library as it is: no numbered work session ("since session 28",
"sessions 5-24", "the session-25 adapters") and no tracker number ("issue #22", "issue 22",
"#22's criterion") in README.md, in docs/ outside docs/reports/ (the dated studies), or in any text
file of rhea/ and rhea_kernels/ (code, docstrings, comments, help, error messages, model cards).

Data files are not text for readers and are not read: the JSONL data sets, tokenizers, weights.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: A numbered session ("session 28", "Session 31's", "sessions 5-24", "session-25"), or a tracker
#: reference ("issue 22", "issues #5 and #6", "#22's criterion", "pre-#27 names"). A name that merely
#: ends in "session" (``ChatSession 2``) has no word boundary before "session"; a number after "#"
#: must stand alone (so a colour such as ``#1f77b4``, or ``#333333``, is not one). A session header of
#: the data ("[session 3, 2023-05-08]", a multi-session conversation's own numbering) is not one either.
HISTORY = re.compile(
    r"(?<!\[)\bsessions?[ \-]\d+"
    r"|\bissues? #?\d+(?!\d|-?[a-z])"
    r"|(?<![\w&/])#\d{1,4}(?![\w])",
    re.IGNORECASE)

TEXT_SUFFIXES = {".py", ".md", ".json", ".html", ".js", ".css", ".jinja", ".txt", ".cfg", ".toml", ".yaml", ".yml"}
#: Not text for readers: vocabularies and the library's data sets.
SKIPPED_PARTS = {"tokenizer", "__pycache__"}


def reader_facing_files() -> list[Path]:
    files = [REPO / "README.md"]
    files += [p for p in sorted((REPO / "docs").rglob("*.md")) if "reports" not in p.relative_to(REPO / "docs").parts]
    for package in ("rhea", "rhea_kernels"):
        files += [p for p in sorted((REPO / package).rglob("*"))
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and not SKIPPED_PARTS & set(p.parts)]
    return [p for p in files if p.is_file()]


def history_references(text: str) -> list[tuple[int, str]]:
    """(line number, the reference) for each history reference in `text`."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in HISTORY.finditer(text)]


@pytest.mark.parametrize("text", [
    "what session 28 measured", "Since Session 31, the default", "sessions 5-24 trained them",
    "the session-25 adapters", "issue #22's criterion", "issue 22 asks", "(issues #5 and #6)",
    "#22's criterion", "pre-#27 names", "see #29.",
])
def test_a_history_reference_is_found(text):
    assert history_references(text), text


@pytest.mark.parametrize("text", [
    "ChatSession 2 turns", "HTTP 404", "colour #1f77b4", "colour #333333", "a session of 40 turns",
    "the session's 3 replies", "`# 1. load`", "step 1,181", "&#39;", "page.html#42-row",
    "issue a warning", "sessions keep their turns", "[session 3, 2023-05-08] what I said", "Issues 6-character hex ids", "issue 22-character",
])
def test_ordinary_text_is_not_a_history_reference(text):
    assert history_references(text) == [], text


def test_reader_facing_text_names_no_session_or_tracker_number():
    found = []
    for path in reader_facing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO)}:{line}: {ref}" for line, ref in history_references(text)]
    assert found == [], ("development history in reader-facing text; say what holds now (history belongs "
                         "in git and CHANGELOG.md):\n" + "\n".join(found))
