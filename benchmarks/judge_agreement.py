"""How far to trust a judge: does it rate MT-Bench's reference answers above mismatched ones?

    OMP_NUM_THREADS=1 python benchmarks/judge_agreement.py --data ../shared/data/mt_bench \
        --judge-local smollm2-135m [--n 30] [--max-new-tokens 256] --out benchmarks/results/judge_agreement_smollm2
    python benchmarks/judge_agreement.py --data ../shared/data/mt_bench --judge-url URL --judge-model NAME ...

For each MT-Bench question that has a GPT-4 reference answer (``reference_answer_gpt-4.jsonl``,
30 questions: math, reasoning, coding), the judge rates with FastChat's ``single-v1`` prompt
(no reference shown, as for open questions) (a) the question's own reference answer and (b)
the reference answer of another question (the next one in the list): a wrong answer in the
right register. Agreement is the share of questions where (a) is rated strictly above (b),
with a 95% bootstrap interval over questions; a rating that cannot be parsed counts as
disagreement. A local judge whose text holds no ``[[rating]]`` is asked for its likeliest
completion of "Rating: [[" after its own explanation (`rhea.eval.judge.Judge`,
``--no-complete-rating`` turns that off); agreement is also reported counting only the ratings
written in the text, and by the probability-weighted rating where the judge's ten probabilities were
read (G-Eval's reading). ``--direct`` asks a local judge for no explanation at all: its rating is
the probability-weighted mean of its completions "1]]".."10]]" of "Rating: [[" right after the prompt
(one prefill per rating instead of a generation; ``Judge(explain=False)``; the likeliest rating alone is
reported too). Mean ratings and parse failures are reported too. Writes ``<out>.json`` and
``<out>.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea.storage import output_file  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="folder with question.jsonl and "
                        "reference_answer_gpt-4.jsonl (FastChat's MT-Bench)")
    parser.add_argument("--judge-local", default=None, help="zoo name or path of a local judge model")
    parser.add_argument("--judge-url", default=None, help="OpenAI-compatible endpoint of the judge")
    parser.add_argument("--judge-model", default="gpt-4")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=30, help="questions to use (of the 30 with references)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="questions judged together: their 2 ratings each "
                        "decode as one batch on a local judge (verdicts equal one-by-one up to float reassociation)")
    parser.add_argument("--out", type=Path, required=True, help="output path without extension")
    parser.add_argument("--no-resume", action="store_true", help="start over instead of continuing <out>.rows.jsonl")
    parser.add_argument("--direct", action="store_true",
                        help="a local judge rates without an explanation: the probability-weighted mean of its ratings "
                             "1-10 after FastChat's prompt and 'Rating: [[' (one prefill per rating; "
                             "rhea.eval.judge.Judge(explain=False))")
    parser.add_argument("--no-complete-rating", action="store_true",
                        help="a local judge's text without [[rating]] stays unrated (FastChat's rule) instead of taking "
                             "the judge's likeliest completion of 'Rating: [['")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error(f"--batch {args.batch}: judge at least 1 question at a time")
    if bool(args.judge_local) == bool(args.judge_url):
        parser.error("pass exactly one of --judge-local MODEL and --judge-url URL")
    if args.direct and not args.judge_local:
        parser.error("--direct reads the rating from a local judge's probabilities; pass --judge-local MODEL")
    questions_path, references_path = args.data / "question.jsonl", args.data / "reference_answer_gpt-4.jsonl"
    for path in (questions_path, references_path):
        if not path.is_file():
            parser.error(f"{path} is missing; --data must be FastChat's mt_bench folder")

    from rhea.eval.judge import Judge, single_request
    from rhea.eval.loaders import load_mt_bench_questions
    from rhea.eval.stats import bootstrap_ci

    questions = [q for q in load_mt_bench_questions(questions_path, references_path) if q.reference][: args.n]
    if len(questions) < 2:
        parser.error("fewer than 2 questions with reference answers; nothing to compare")
    # one row per question, appended as it is rated, so a killed run continues where it stopped
    settings = {"judge_local": args.judge_local, "judge_url": args.judge_url, "judge_model": args.judge_model,
                "max_new_tokens": args.max_new_tokens, "complete_rating": not args.no_complete_rating}
    if args.direct:  # recorded only when set, so the explaining runs' rows resume as before
        # the rating is the probability-weighted one (`readout` says so: a likeliest-rating readout is another run)
        settings = {**settings, "max_new_tokens": None, "explain": False, "readout": "expected"}
    rows_path = output_file(args.out, ".rows.jsonl")
    done = {}
    if rows_path.is_file() and not args.no_resume:
        lines = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        saved = dict(lines[0].get("settings") or {}) if lines else None
        if saved is not None:
            saved.pop("n_questions", None)  # --n may change: the questions are a prefix of one list
        if saved != settings:
            parser.error(f"{rows_path} was written with other settings ({lines[0].get('settings') if lines else 'empty'}); "
                         "pass the same ones, another --out, or --no-resume")
        ids = {q.question_id for q in questions}
        done = {row["question_id"]: row for row in lines[1:] if row["question_id"] in ids}
        print(f"resuming {rows_path}: {len(done)} of {len(questions)} questions rated", flush=True)
    else:
        rows_path.parent.mkdir(parents=True, exist_ok=True)
        rows_path.write_text(json.dumps({"settings": settings}) + "\n")
    judge_name = f"local:{args.judge_local}" if args.judge_local else f"{args.judge_url}:{args.judge_model}"
    if len(done) >= len(questions):
        generator = None  # everything asked is rated already: no judge to build
    elif args.judge_local:
        from rhea.backends.llm import HFGenerator
        from rhea.modeling.loading import load_rhea_model

        generator = HFGenerator(load_rhea_model(args.judge_local, device=args.device))
    else:
        from rhea.backends.llm import OpenAICompatibleGenerator

        generator = OpenAICompatibleGenerator(args.judge_url, model=args.judge_model)
    judge = (Judge(generator, max_new_tokens=args.max_new_tokens, complete_rating=not args.no_complete_rating,
                   batch_size=2 * args.batch, explain=not args.direct) if generator is not None else None)
    started = time.perf_counter() - sum(r.get("seconds", 0.0) for r in done.values())
    todo = [i for i, q in enumerate(questions) if q.question_id not in done]
    for start in range(0, len(todo), args.batch):
        chunk = todo[start:start + args.batch]
        t0 = time.perf_counter()
        # each question's own reference and the next question's: a wrong answer in the right register
        requests = [single_request(questions[i].turns[0], answer) for i in chunk
                    for answer in (questions[i].reference[0], questions[(i + 1) % len(questions)].reference[0])]
        verdicts = judge.judge_many(requests)
        seconds = round((time.perf_counter() - t0) / len(chunk), 1)
        for n, i in enumerate(chunk):
            q, wrong = questions[i], questions[(i + 1) % len(questions)]
            good, bad = verdicts[2 * n], verdicts[2 * n + 1]
            done[q.question_id] = {
                "question_id": q.question_id, "category": q.category, "mismatched_with": wrong.question_id,
                "reference_rating": good.rating, "mismatched_rating": bad.rating,
                "agree": good.rating is not None and bad.rating is not None and good.rating > bad.rating,
                "tie": good.rating is not None and good.rating == bad.rating,
                "reference_source": good.source, "mismatched_source": bad.source,
                # the probability-weighted rating where the judge's ten probabilities are known (else the rating)
                "reference_expected": good.expected, "mismatched_expected": bad.expected,
                "reference_raw": good.raw, "mismatched_raw": bad.raw,  # whole: the rating is at the end
                "seconds": seconds}  # the chunk's time per question
            with rows_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(done[q.question_id]) + "\n")
            print(json.dumps({k: done[q.question_id][k] for k in ("question_id", "reference_rating",
                                                                   "mismatched_rating")}), flush=True)
    rows = [done[q.question_id] for q in questions]
    agreement = bootstrap_ci([float(r["agree"]) for r in rows])
    # G-Eval's reading: the probability-weighted ratings (= the ratings where no probabilities were read)
    expected = [(r.get("reference_expected", r["reference_rating"]), r.get("mismatched_expected", r["mismatched_rating"]))
                for r in rows]
    agreement_expected = bootstrap_ci([float(a is not None and b is not None and a > b) for a, b in expected])
    # FastChat's reading alone: both ratings written in the judge's text (completed ones count as unparsed)
    parsed = [float(r["agree"] and r.get("reference_source", "parsed") == "parsed"
                    and r.get("mismatched_source", "parsed") == "parsed") for r in rows]
    agreement_parsed = bootstrap_ci(parsed)
    completed = sum((r.get("reference_source") == "completed") + (r.get("mismatched_source") == "completed") for r in rows)
    rated = [r for r in rows if r["reference_rating"] is not None and r["mismatched_rating"] is not None]
    summary = {
        "judge": judge_name, "questions": len(rows), "agreement": agreement.to_dict(),
        "agreement_text_ratings_only": agreement_parsed.to_dict(), "completed_ratings": completed,
        "agreement_expected_rating": agreement_expected.to_dict(),
        "ties_expected_rating": sum(a is not None and a == b for a, b in expected),
        "direct": bool(args.direct),
        "ties": sum(r["tie"] for r in rows),
        "unparsed_ratings": sum((r["reference_rating"] is None) + (r["mismatched_rating"] is None) for r in rows),
        "mean_reference_rating": (sum(r["reference_rating"] for r in rated) / len(rated)) if rated else None,
        "mean_mismatched_rating": (sum(r["mismatched_rating"] for r in rated) / len(rated)) if rated else None,
        "judge_max_new_tokens": None if args.direct else args.max_new_tokens, "wall_s": time.perf_counter() - started,
        "command": "python benchmarks/judge_agreement.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    output_file(args.out, ".json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    lines = [f"# Judge agreement: {judge_name}", "",
             f"{len(rows)} MT-Bench questions with GPT-4 reference answers; the judge (FastChat single-v1, no "
             "reference shown) rates the question's reference answer and another question's reference answer"
             + (" without an explanation (--direct: the probability-weighted rating of 'Rating: [[k]]' right after the "
                "prompt)." if args.direct
                else "."), "",
             f"- agreement (reference rated strictly above the mismatched answer): **{agreement.format()}** "
             "(95% bootstrap interval over questions; chance for a judge that rates at random on 10 levels ≈ 0.45)",
             (f"- the same counting only ratings written in the judge's text (FastChat's rule): "
              f"**{agreement_parsed.format()}**; {completed} of {2 * len(rows)} ratings were completed "
              "(no [[rating]] in the text: the judge's likeliest completion of 'Rating: [[' after its explanation)")
             if not args.direct else "- no text is written with --direct: every rating is read from probabilities",
             f"- by the probability-weighted rating (G-Eval's reading; a rating read from the text counts as itself): "
             f"**{agreement_expected.format()}**, {summary['ties_expected_rating']} ties",
             f"- ties: {summary['ties']}; unparsed ratings: {summary['unparsed_ratings']} of {2 * len(rows)}",
             f"- mean rating, reference: {summary['mean_reference_rating']}; mismatched: "
             f"{summary['mean_mismatched_rating']}", "", f"Reproduce: `{summary['command']}`", ""]
    output_file(args.out, ".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
