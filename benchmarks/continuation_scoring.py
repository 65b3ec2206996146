"""A direct judge's rating cost: `HFGenerator.continuation_logprobs` scoring "1]]".."10]]" after a judge
prompt, the candidates as one batch (``batch=True``, the default) vs one forward each on a copy of the
prompt's cache (``batch=False``, one candidate at a time), one run.

For each --answer-tokens length, an MT-Bench ``single-v1`` judge prompt (`single_request`) whose answer
is that many tokens of filler text is rendered with the model's chat template plus "Rating: [[", and
both ways score the ten ratings: interleaved rounds (the order reversed every other round), median
seconds per call (prompt prefill included: what one rating costs), the ratio, and the largest
difference between the two ways' log-probabilities.

    python benchmarks/continuation_scoring.py --model qwen2.5-coder-1.5b --threads 2 \\
        --out benchmarks/results/continuation_scoring_qwen_cpu
    python benchmarks/continuation_scoring.py --rounds 1 --answer-tokens 50 --out /tmp/cs   # smoke, embedded model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea.storage import output_file  # noqa: E402

FILLER = ("The function reads the file line by line, splits each line on commas, converts the third field to "
          "an integer and adds it to a running total, which it returns after the last line. ")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="zoo name or model folder (default: the embedded model)")
    ap.add_argument("--answer-tokens", default="200,1000", help="comma-separated answer lengths in tokens")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--note", default="", help="what else the machine was doing (recorded in OUT.json)")
    ap.add_argument("--out", required=True, help="writes OUT.json and OUT.png")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.answer_tokens.split(",") if x.strip()]
    if not lengths or min(lengths) < 1 or args.rounds < 1:
        ap.error("--answer-tokens needs positive integers and --rounds >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    from rhea.backends.chat_template import apply_chat_template
    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import single_request
    from rhea.modeling.loading import load_rhea_model

    gen = HFGenerator(load_rhea_model(args.model, device=args.device))
    tok = gen.tokenizer
    candidates = [f"{k}]]" for k in range(1, 11)]
    filler_ids = tok(FILLER * 200, add_special_tokens=False)["input_ids"]
    rows = []
    for n in lengths:
        answer = tok.decode(filler_ids[:n])
        request = single_request("Write a Python function that sums the third column of a CSV file.", answer)
        prompt = apply_chat_template(tok, list(request.messages)) + "Rating: [["
        prompt_tokens = len(tok(prompt, add_special_tokens=False)["input_ids"])
        ways = {"loop": False, "batch": True}
        scores = {name: gen.continuation_logprobs(prompt, candidates, batch=b)[0] for name, b in ways.items()}  # warm-up
        samples = {name: [] for name in ways}
        for r in range(args.rounds):
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                t0 = time.perf_counter()
                gen.continuation_logprobs(prompt, candidates, batch=ways[name])
                samples[name].append(time.perf_counter() - t0)
        loop, batch = statistics.median(samples["loop"]), statistics.median(samples["batch"])
        diff = max(abs(a - b) for a, b in zip(scores["loop"], scores["batch"]))
        rows.append(dict(answer_tokens=n, prompt_tokens=prompt_tokens, loop_s=loop, batch_s=batch, speedup=loop / batch,
                         max_abs_logprob_diff=diff, samples=samples))
        print(f"prompt {prompt_tokens:5d} tokens: loop {loop:7.3f} s  batch {batch:7.3f} s  x{loop / batch:5.2f}  "
              f"(max |Δ log p| {diff:.2e})", flush=True)

    result = dict(model=args.model, device=args.device, threads=torch.get_num_threads(), cpu_count=os.cpu_count(),
                  rounds=args.rounds, note=args.note, rows=rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(result, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["loop_s"] for r in rows], 0.4, label="one forward per rating (loop)")
    ax.bar([x + 0.2 for x in xs], [r["batch_s"] for r in rows], 0.4, label="one batch of ten (default)")
    for x, r in zip(xs, rows):
        ax.annotate(f"x{r['speedup']:.2f}", (x + 0.2, r["batch_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [f"{r['prompt_tokens']} prompt tokens" for r in rows])
    ax.set_ylabel("seconds per direct rating")
    ax.set_title(f"Scoring ratings 1-10 after a judge prompt, {args.model}, {args.device}, "
                 f"{torch.get_num_threads()} threads ({args.rounds} rounds, median)", fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
