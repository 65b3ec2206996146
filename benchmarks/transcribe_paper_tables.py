"""Transcribe the result tables rhea reproduces from the papers' full texts into
``benchmarks/paper_tables.json`` — every cell copied verbatim with its table reference.

    python benchmarks/transcribe_paper_tables.py --seeds ../shared/seeds [--out benchmarks/paper_tables.json]

The seed texts (see their README) hold each table as tab-separated lines; this script finds
each table by its header line, splits the cells, and keeps for every cell the text as
printed (markup removed), its number (None for "-" / "–"), its emphasis (bold = best,
underline = second best in the papers' convention), footnote marks, and ``ref`` (paper and
table). Column names are written here from the tables' two-line headers. Nothing is typed
by hand: rerun it to check the JSON against the texts.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

PAPERS = {
    "rhea": {"file": "002_71f074c057ccbf46.txt", "short": "Rhea",
             "title": "Rhea: Role-aware Heuristic Episodic Attention for Conversational LLMs",
             "setting": "Mistral-7B-Instruct-v0.2 backbone (LongAlpaca/Memochat: Vicuna-7B), Qwen3-0.6B "
                        "instruction recognizer, n=8 latents per turn, tau_low 0.5 / tau_high 0.8, GPT-4 as judge, "
                        "one RTX 3090, greedy decoding"},
    "sculptor": {"file": "003_0060e734cb546d5b.txt", "short": "Sculptor",
                 "title": "Sculptor: Empowering LLMs with Cognitive Agency via Active Context Management",
                 "setting": "Table 1: Claude-4-Sonnet, GPT-4.1, DeepSeek-V3 with and without ACM tools (prompted); "
                            "Table 2: M3 (13B, internal) and GLM-4.5-air, fine-tuned (SFT) and GSPO-trained (RL)"},
    "acr": {"file": "000_7eb0a03e960934e1.txt", "short": "ACR",
            "title": "ACR: Adaptive Context Refactoring via Context Refactoring Operators for Multi-Turn Dialogue",
            "setting": "Qwen2.5-7B-Instruct reasoner, E5 retriever (Search-R1 setting), Router and Refactorer "
                       "trained with TGSE (teacher GPT-5.2); exact match, %"},
    "ace": {"file": "001_e99da9efa55181ee.txt", "short": "ACE",
            "title": "To Retrieve or To Think? An Agentic Approach for Context Evolution",
            "setting": "multi-hop QA; accuracy (%) and average tokens consumed"},
    "context-agent": {"file": "004_adfded5a7709ccda.txt", "short": "Context-Agent",
                      "title": "Context-Agent: Dynamic Discourse Trees for Non-Linear Dialogue",
                      "setting": "NTM benchmark",
                      "no_tables": "The seed text is a summary page: its only table (Table 1) compares context-"
                                   "management paradigms qualitatively; it reports no numbers (the abstract claims "
                                   "improved task completion rates and token efficiency across LLMs)."},
}

# (paper, table, header-line prefix, columns, how the first cells name the row)
TABLES = [
    ("rhea", "Table 1", "Model\tMT-Bench\t", ["MT-Bench Acc", "MT-Bench Latency (s)", "MT-Eval Acc",
                                              "MT-Eval Latency (s)", "Long-MT-Bench+ Acc",
                                              "Long-MT-Bench+ Latency (s)"], "name"),
    ("rhea", "Table 2", "Subset\tFull\tShared\tRhea", ["Full", "Shared", "Rhea"], "name"),
    ("rhea", "Table 3", "Model Variant\tIAR", ["IAR"], "name"),
    ("rhea", "Table 4", "EM Strategy\tAvg. Score (IAR)", ["Avg. Score (IAR)"], "name"),
    ("rhea", "Table 5", "Model\tAccuracy\tPrecision\tRecall", ["Accuracy", "Precision", "Recall"], "name"),
    ("sculptor", "Table 1", "Method\tNeedleBench-M-RS\t",
     ["NeedleBench-M-RS 2-N", "NeedleBench-M-RS 3-N", "NeedleBench-M-RS 4-N", "NeedleBench-M-RS 5-N",
      "NeedleBench-M-RS Avg", "PI-LLM 4/1K", "PI-LLM 8/2K", "PI-LLM 16/4K", "PI-LLM 32/8K", "PI-LLM 64/16K",
      "PI-LLM 128/32K", "PI-LLM 256/64K", "PI-LLM Avg"], "grouped"),
    ("sculptor", "Table 2", "Method\tPI-LLM (Acc %)\t",
     ["PI-LLM (Acc %)", "NeedleBench-M-RS (Acc %)", "MRCR (Acc %)", "LongBenchV2 (Acc %)", "Frames (Acc %)",
      "Avg (Norm)"], "name"),
    ("acr", "Table 1", "Type\tMethod\tSingle-Hop QA",
     ["NQ†", "TriviaQA*", "PopQA*", "HotpotQA†", "2Wiki*", "MuSiQue*", "Bamboogle*"], "typed"),
    ("acr", "Table 2", "Variant\tSingle-Hop QA",
     ["NQ†", "TriviaQA*", "PopQA*", "HotpotQA†", "2Wiki*", "MuSiQue*", "Bamboogle*"], "name"),
    ("ace", "Table 1", "Method\tMultiHop-RAG\t\tHotpotQA",
     ["MultiHop-RAG Acc. (%)", "MultiHop-RAG Avg. Tokens", "HotpotQA Acc. (%)", "HotpotQA Avg. Tokens",
      "2WikiQA Acc. (%)", "2WikiQA Avg. Tokens"], "name"),
    ("ace", "Table 2", "N\tMultiHop-RAG\t\t\tHotpotQA",
     ["MultiHop-RAG Acc. (%)", "MultiHop-RAG Avg. Tokens", "MultiHop-RAG Think (%)", "HotpotQA Acc. (%)",
      "HotpotQA Avg. Tokens", "HotpotQA Think (%)", "2WikiQA Acc. (%)", "2WikiQA Avg. Tokens",
      "2WikiQA Think (%)"], "name"),
]


def parse_cell(raw: str, ref: str, column: str) -> dict:
    style = [s for tag, s in (("<b>", "bold"), ("<u>", "underline")) if tag in raw]
    notes = re.findall(r"<sup>\s*([^<]*?)\s*</sup>", raw)
    text = re.sub(r"<sup>.*?</sup>", "", raw)
    text = re.sub(r"<[^>]+>", "", text).strip()
    number = text.replace(",", "")
    try:
        value = float(number)
    except ValueError:
        value = None
    cell = {"column": column, "text": text, "value": value, "ref": ref}
    if style:
        cell["style"] = style
    if notes:
        cell["footnotes"] = notes
    return cell


def _name(raw: str) -> tuple[str, list[str]]:
    notes = re.findall(r"<sup>\s*([^<]*?)\s*</sup>", raw)
    name = re.sub(r"<sup>.*?</sup>", "", raw)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", name)).strip(), notes


def transcribe_table(lines: list[str], paper: str, table: str, header: str, columns: list[str], naming: str) -> dict:
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        raise SystemExit(f"{paper} {table}: header {header!r} not found in the seed text; is --seeds right?")
    caption = next((line.strip() for line in lines if line.startswith(f"{table}:")), None)
    ref = f"{PAPERS[paper]['short']} {table}"
    body, i = [], start + 1
    while i < len(lines) and "\t" in lines[i]:
        body.append(lines[i])
        i += 1
    rows, group, kind = [], None, None
    for line in body:
        cells = line.split("\t")
        offset = 2 if naming == "typed" else 1
        values = cells[offset:offset + len(columns)]
        if not any(v.strip() for v in values):
            if naming == "grouped" and cells[0].strip():
                group = _name(cells[0])[0]
            continue  # the second header line, or a group heading
        name, notes = _name(cells[offset - 1])
        if not name and not (naming == "typed" and cells[0].strip()):
            continue  # the header's second line (units under the benchmark names)
        if naming == "typed":
            kind = _name(cells[0])[0] or kind
        name = name.replace("$\\Delta$", "Δ")
        row = {"name": name, "cells": [parse_cell(v, ref, c) for c, v in zip(columns, values)]}
        if naming == "grouped":
            row["group"] = group
        if naming == "typed":
            row["type"] = kind
        if notes:
            row["footnotes"] = notes
        if len(values) != len(columns):
            raise SystemExit(f"{ref}: row {name!r} has {len(values)} cells for {len(columns)} columns")
        rows.append(row)
    return {"ref": ref, "caption": caption, "columns": columns, "rows": rows}


def footnotes(lines: list[str]) -> dict[str, str]:
    """Rhea Table 1's footnotes (``<sup>a</sup> These methods ...``)."""
    found = {}
    for line in lines:
        m = re.match(r"^<sup>(\w)</sup>\s+(.*)$", line.strip())
        if m and m.group(1) in "ab":
            found.setdefault(m.group(1), m.group(2).strip())
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", required=True, type=Path, help="folder with the papers' full texts")
    parser.add_argument("--out", type=Path, default=HERE / "paper_tables.json")
    args = parser.parse_args(argv)
    out = {"format": "rhea-paper-tables/1",
           "source": "the papers' full texts in ../shared/seeds (README there maps files to papers), transcribed by "
                     "benchmarks/transcribe_paper_tables.py; style bold = best, underline = second best as printed",
           "papers": {}}
    texts = {}
    for key, meta in PAPERS.items():
        path = args.seeds / meta["file"]
        if not path.is_file():
            raise SystemExit(f"{path} is missing; --seeds must be the folder holding the five papers' texts")
        texts[key] = path.read_text(encoding="utf-8").splitlines()
        out["papers"][key] = {**meta, "tables": {}}
    for paper, table, header, columns, naming in TABLES:
        out["papers"][paper]["tables"][table] = transcribe_table(texts[paper], paper, table, header, columns, naming)
    out["papers"]["rhea"]["tables"]["Table 1"]["footnotes"] = footnotes(texts["rhea"])
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    n = sum(len(r["cells"]) for p in out["papers"].values() for t in p["tables"].values() for r in t["rows"])
    print(f"{args.out}: {n} cells from {len(TABLES)} tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
