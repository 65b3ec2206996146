"""Compressor fidelity: can the model answer from a reply it only sees as latents?

Held-apart recall dialogues (`rhea.training.synthetic`, names never used in training, a seed
disjoint from the training data): turn 0's reply states facts, one unrelated turn follows,
then a question whose answer is stated only in turn 0's reply. Turn 0's reply is shown as

* raw text (trained model),  * latents from the trained compress adapter,
* latents from untrained (fresh) adapters,  * dropped (turn 0 left out),

and accuracy = share of answers containing the fact. A secondary measure, `on_topic` = share
of answers naming the person asked about, tells a fluent wrong answer from a derailed one
(off-scale latents make the model emit noise). Writes JSON + PNG.

    python benchmarks/fidelity.py --trained rhea/data/adapters/smollm2-135m --n 32
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from rhea.context import Conversation, Latent, Turn, TurnDecision
from rhea.policies import assemble_plan
from rhea.session.generation import generate_from_plan
from rhea.training.synthetic import HELD_OUT_NAMES, recall_dialogue
from rhea.storage import output_file

CONDITIONS = ("raw", "latent_trained", "latent_untrained", "dropped")


def plan_for(dialogue, condition: str, model):
    """The plan for the final question with turn 0's reply in the given form (filler turns raw)."""
    history = Conversation([Turn(u, a) for u, a in dialogue.turns[:-1]])
    tier0 = {"raw": "raw", "dropped": "drop"}.get(condition, "latent")
    decisions = [TurnDecision(0, tier0)] + [TurnDecision(i, "raw") for i in range(1, len(history))]
    latents = {}
    if tier0 == "latent":
        with torch.no_grad():
            latents[0] = Latent(model.compress([history[0].assistant])[0], 0)
    return assemble_plan(f"fidelity-{condition}", history, dialogue.turns[-1][0], decisions, latents=latents)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trained", required=True, help="save_pretrained directory of the trained adapters")
    p.add_argument("--n", type=int, default=32, help="held-apart dialogues")
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--out", default="benchmarks/results/fidelity")
    args = p.parse_args()
    torch.set_num_threads(1)

    from rhea.modeling import RheaForCausalLM, load_default_model

    trained = RheaForCausalLM.from_pretrained(args.trained).eval()
    untrained, _ = load_default_model(trained=False)
    untrained.eval()
    rng = random.Random(args.seed)
    dialogues = [recall_dialogue(rng, n_filler=1, names=HELD_OUT_NAMES) for _ in range(args.n)]
    rows, t0 = [], time.perf_counter()
    for k, d in enumerate(dialogues):
        for cond in CONDITIONS:
            model = untrained if cond == "latent_untrained" else trained
            text = generate_from_plan(model, plan_for(d, cond, model), max_new_tokens=args.max_new_tokens).text
            subject = next(n for n in HELD_OUT_NAMES if n in d.turns[-1][0])
            rows.append({"dialogue": k, "condition": cond, "asked": d.asked, "fact": d.answer, "answer": text,
                         "correct": d.answer.lower() in text.lower(), "on_topic": subject in text})
    accuracy = {c: sum(r["correct"] for r in rows if r["condition"] == c) / args.n for c in CONDITIONS}
    on_topic = {c: sum(r["on_topic"] for r in rows if r["condition"] == c) / args.n for c in CONDITIONS}
    result = {"trained_adapters": args.trained, "n_dialogues": args.n, "seed": args.seed,
              "max_new_tokens": args.max_new_tokens, "accuracy": accuracy, "on_topic": on_topic,
              "trained_config_extra": trained.config.extra, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(result, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(CONDITIONS))
    ax.bar([x - 0.2 for x in xs], [100 * accuracy[c] for c in CONDITIONS], width=0.4, label="fact correct")
    ax.bar([x + 0.2 for x in xs], [100 * on_topic[c] for c in CONDITIONS], width=0.4, label="names the subject")
    ax.set_xticks(list(xs), CONDITIONS)
    ax.legend()
    ax.set_ylabel("share of answers (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"fact recall from turn-0 reply, SmolLM2-135M, n={args.n}")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=120)
    print(json.dumps({"accuracy": accuracy, "on_topic": on_topic}))


if __name__ == "__main__":
    main()
