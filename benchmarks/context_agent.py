"""Context-Agent vs vanilla on non-linear conversations: task completion and tokens per turn.

Data:
- `--ntm PATH`: the NTM benchmark's JSONL (github.com/Steve2457/Context-Agent, input/dataset-full.jsonl):
  one object per line, {"conversation_id", "metadata": {"rounds"}, "user_turns": [{"turn_id", "content"}],
  "checkpoint_question"}. The last user turn is the checkpoint turn; its reply is judged against
  the checkpoint question (needs `--judge-url`: NTM checkpoints are not rule-checkable).
- generated: branching conversations this script writes (two interleaved topics, a change of an
  option, a return to the earlier option, then a checkpoint turn), each with rule checks
  (strings the final reply must contain / must not contain), so no judge is needed.

Each conversation runs twice on the same reply model: policy "vanilla" (full history) and
"context-agent" (whose topic/branch decisions and summaries use the same model as a
`TextGenerator`, embeddings from MiniLM). Tokens per turn = chat-template prompt tokens of the
reply call; the controller's own prompt tokens are reported separately.

    python benchmarks/context_agent.py --generated 3 --ntm /path/dataset-full.jsonl --ntm-limit 1
"""
from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

CITIES = ["Lisbon", "Vienna", "Krakow", "Seville", "Porto", "Bergen"]
BAKES = [("banana bread", "walnuts"), ("focaccia", "rosemary"), ("scones", "raisins"), ("brioche", "chocolate")]

JUDGE_SYSTEM = (
    "You grade an assistant's final reply against a checkpoint question that may list several goals. "
    "Split it into its separate goals, check each against the reply only, and count a goal as met only "
    "when the reply clearly meets it. Answer with 'x/y' only: x goals met out of y."
)


def load_ntm_jsonl(path: str | Path) -> list[dict]:
    """NTM conversations as episodes {"id", "user_turns", "checkpoint_question", "checks": None}."""
    episodes = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            turns = [t["content"] for t in sorted(obj["user_turns"], key=lambda t: int(t["turn_id"]))]
            episodes.append({"id": str(obj["conversation_id"]), "user_turns": turns,
                             "checkpoint_question": str(obj["checkpoint_question"]).strip(), "checks": None})
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number} is not an NTM record ({exc}); expected conversation_id, "
                             "user_turns [{turn_id, content}], checkpoint_question") from exc
    return episodes


def branching_conversation(rng: random.Random, index: int) -> dict:
    """Two interleaved topics, a changed option, a return to the earlier option, a checkpoint."""
    city = rng.choice(CITIES)
    bake, extra = rng.choice(BAKES)
    first, changed = rng.sample([80, 95, 110, 120, 140, 160], 2)
    temp = rng.choice([170, 180, 190])
    turns = [
        f"I am planning a trip to {city}. My hotel budget is {first} euros per night. Suggest an area to stay.",
        f"Different topic: how long should I bake {bake} at {temp} degrees?",
        f"For the {city} trip, change the hotel budget to {changed} euros per night.",
        f"Back to the {bake}: can I add {extra}?",
        f"About {city} again: forget {changed}, go back to the original budget of {first} euros per night.",
        f"Summarize my {city} trip plan: the city and the hotel budget per night.",
    ]
    return {"id": f"generated-{index}", "user_turns": turns,
            "checkpoint_question": f"Does the reply name (1) {city} and (2) a budget of {first} euros, (3) not {changed}?",
            "checks": {"required": [city, str(first)], "forbidden": [str(changed)]}}


def rule_score(reply: str, checks: dict) -> tuple[int, int]:
    met = sum(1 for s in checks["required"] if s.lower() in reply.lower())
    met += sum(1 for s in checks["forbidden"] if not re.search(rf"\b{re.escape(s)}\b", reply))
    return met, len(checks["required"]) + len(checks["forbidden"])


def judge_score(judge, reply: str, question: str) -> tuple[int, int, str]:
    verdict = judge.generate([{"role": "system", "content": JUDGE_SYSTEM},
                              {"role": "user", "content": f"Final reply: {{{reply}}}\nCheckpoint question: {question}"}],
                             max_new_tokens=16)
    match = re.search(r"(\d+)\s*/\s*(\d+)", verdict)
    if not match:
        raise ValueError(f"judge verdict {verdict!r} is not 'x/y'")
    return int(match.group(1)), int(match.group(2)), verdict


def run_episode(policy, answerer, tokenizer, episode: dict, max_new_tokens: int) -> dict:
    from rhea.context import Conversation, Turn, render

    policy.reset()
    conv, per_turn = Conversation(), []
    for user in episode["user_turns"]:
        t0 = time.perf_counter()
        plan = policy.build(conv, user)
        t_build = time.perf_counter() - t0
        prompt_tokens = int(render(plan, tokenizer).input_ids.shape[1])
        reply = answerer.generate(plan.text_messages(), max_new_tokens=max_new_tokens)
        conv.append(Turn(user, reply))
        policy.observe(conv[-1])
        per_turn.append({"prompt_tokens": prompt_tokens, "build_s": round(t_build, 2),
                         "tiers": [d.tier for d in plan.decisions.turns],
                         "records": plan.decisions.records if policy.name == "context-agent" else []})
    return {"id": episode["id"], "final_reply": conv[-1].assistant, "turns": per_turn,
            "forest_trace": policy.forest.trace() if hasattr(policy, "forest") else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ntm", help="path to the NTM JSONL (dataset-full.jsonl)")
    parser.add_argument("--ntm-limit", type=int, default=1)
    parser.add_argument("--generated", type=int, default=3, help="number of generated branching conversations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--judge-url", help="OpenAI-compatible base URL of a judge (e.g. http://127.0.0.1:8000/v1)")
    parser.add_argument("--judge-model", default="judge")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "context_agent.json"))
    args = parser.parse_args()

    import torch

    from rhea.agents.context_agent import ContextAgent
    from rhea.policies import get_policy
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.backends.llm import HFGenerator, OpenAICompatibleGenerator
    from rhea.modeling import load_default_model

    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    episodes = [branching_conversation(rng, i) for i in range(args.generated)]
    if args.ntm:
        episodes += load_ntm_jsonl(args.ntm)[: args.ntm_limit]
    model, tokenizer = load_default_model()
    model.eval()
    answerer = HFGenerator(model, tokenizer)  # adapters off: the plain SmolLM2 answers for both policies
    controller = HFGenerator(model, tokenizer)
    judge = OpenAICompatibleGenerator(args.judge_url, args.judge_model) if args.judge_url else None
    policies = {
        "vanilla": get_policy("vanilla", tokenizer=tokenizer),
        "context-agent": ContextAgent(controller, MiniLMEmbedder(), tokenizer=tokenizer,
                                      decision_max_new_tokens=40, summary_max_new_tokens=32),
    }
    rows = []
    for episode in episodes:
        for name, policy in policies.items():
            t0 = time.perf_counter()
            result = run_episode(policy, answerer, tokenizer, episode, args.max_new_tokens)
            result.update(policy=name, seconds=round(time.perf_counter() - t0, 1))
            if judge is not None:
                met, total, verdict = judge_score(judge, result["final_reply"], episode["checkpoint_question"])
                result.update(met=met, goals=total, scored_by="judge", verdict=verdict)
            elif episode["checks"] is not None:
                met, total = rule_score(result["final_reply"], episode["checks"])
                result.update(met=met, goals=total, scored_by="rules")
            else:
                result.update(met=None, goals=None, scored_by="unscored (NTM needs --judge-url)")
            rows.append(result)
            print(f"{episode['id']:>14} {name:>13}: score {result['met']}/{result['goals']} "
                  f"mean prompt tokens {sum(t['prompt_tokens'] for t in result['turns']) / len(result['turns']):.0f} "
                  f"({result['seconds']} s)", flush=True)
    summary = {}
    for name in policies:
        mine = [r for r in rows if r["policy"] == name]
        scored = [r for r in mine if r["met"] is not None]
        turns = [t["prompt_tokens"] for r in mine for t in r["turns"]]
        summary[name] = {
            "conversations": len(mine), "scored": len(scored),
            "task_completion": round(sum(r["met"] / r["goals"] for r in scored) / len(scored), 3) if scored else None,
            "mean_prompt_tokens_per_turn": round(sum(turns) / len(turns), 1),
            "mean_prompt_tokens_by_turn": [round(sum(r["turns"][i]["prompt_tokens"] for r in mine
                                                     if i < len(r["turns"])) / sum(1 for r in mine if i < len(r["turns"])), 1)
                                           for i in range(max(len(r["turns"]) for r in mine))],
        }
    summary["context-agent"]["controller_prompt_tokens"] = controller.prompt_tokens
    summary["context-agent"]["controller_completion_tokens"] = controller.completion_tokens
    summary["context-agent"]["controller_llm_calls"] = policies["context-agent"].navigator.llm_calls
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": "SmolLM2-135M-Instruct (embedded)", "args": vars(args), "summary": summary,
                               "episodes": rows}, indent=1, ensure_ascii=False))
    plot(summary, out.with_suffix(".png"))
    print(json.dumps(summary, indent=1))


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, s in summary.items():
        ax.plot(range(1, len(s["mean_prompt_tokens_by_turn"]) + 1), s["mean_prompt_tokens_by_turn"], marker="o",
                label=f"{name} (completion {s['task_completion']})")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens of the reply call")
    ax.set_title("Context-Agent vs vanilla, SmolLM2-135M")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
