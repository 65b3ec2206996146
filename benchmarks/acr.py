"""ACR on multi-turn QA with drift: EM (with 95% Wilson intervals) and tokens for the paper's settings.

Tasks: `rhea.agents.acr.tasks.drift_tasks` (facts corrected mid-conversation, repeated
rejected answers, and clean controls), built from the eval harness's key/value vocabulary.
One controller model carries the router and refactorer LoRA adapters; the solver is the
same base model with adapters disabled (the paper keeps its reasoner frozen). Settings, as
in the paper's Tables 1-2 (§5.2, ablation §5.2.3):

- ``none``: the raw history (direct inference; what ACR's none leaves);
- ``prompt-only``: router and refactorer prompted on the base model (Table 2 "Base");
- ``w/o-router``: the base model routes, the trained refactorer refactors (Table 2 "w/o Router");
- ``w/o-refactorer``: the trained router routes, the base model refactors (Table 2 "w/o Refactorer");
- ``trained``: both trained adapters (Table 2 "Ours").

Every ACR setting runs the model-driven refactorer on every operator (no deterministic
shortcuts). Because a router picks only the operators a task calls for, an *operator
sweep* then forces each of the six operators in turn (router bypassed) on ``--sweep-n``
test tasks, for the prompt-only and the trained refactorer, so a run shows every operator
exercised. ``acr.json`` reports, per setting, the router's operator counts and, per
operator, how often the refactorer ran and how its output was used (``refactorer``:
inside ``<summary>``; ``fallback-raw``: the paper's raw-output fallback;
``fallback-original``: empty output).

TGSE (`rhea.training.acr`) trains the adapters on training tasks disjoint from the test
tasks: ``--setting cpu`` uses `TGSEConfig.cpu_demo()` (small, greedy), ``--setting paper``
the paper's defaults (400 seed tasks + 200 per round, 18 rounds, r16/alpha32, 3 epochs,
batch 4, patience 3, temperature 0.7). ``--adapters DIR`` evaluates adapters trained before
instead of training. The teacher is the offline rule teacher (``--teacher rules``) or any
OpenAI-compatible endpoint (``--teacher http://host:port/v1#model``; the paper uses GPT-5.2).

Tasks: ``--tasks drift`` (the default, above) or ``--tasks babi --babi FILE...``: bAbI stories
(e.g. shared/data's qa2/qa3, multi-hop) with one fact per user turn (`babi_tasks`), the
nearest task in the data at hand to the paper's multi-hop QA (HotpotQA, 2Wiki, MuSiQue are not
in shared/data). ``--settings`` runs a subset (``none,prompt-only`` needs no TGSE, which is
skipped); every ACR setting is compared with ``none`` on the same tasks (paired bootstrap
difference and sign-flip p-value). Rows go to ``acr_rows.jsonl`` as they finish and a rerun
with the same ``--out`` continues from them (``--no-resume`` starts over); ``acr.json`` is
rewritten after every setting. ``--shard I/N`` evaluates the settings on every N-th test task from
the I-th (the sweep is not split), so N processes can share the cores: give each its own
``--out`` holding a copy of the rows done so far, then append the rows of the others to one
folder's ``acr_rows.jsonl`` and rerun there without ``--shard``: every row is reused, nothing
runs. ``--sweep-only`` runs the operator sweep alone (``--settings`` names its refactorers).

Writes ``acr.json`` + ``acr.png`` and a router/refactorer trace (``acr_trace.json``) to
``--out``. CPU smoke run (the 135M model cannot follow the JSON/<summary> formats, so its
numbers only show the pipeline runs):

    flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python benchmarks/acr.py --n-test 2 --n-train 2 \\
        --iterations 1 --sweep-n 1 --out benchmarks/results/acr-smoke

Prompt-only run on the capable model, CPU (docs/reports/fidelity.md, ## ACR, "Runs"):

    python benchmarks/acr.py --model qwen2.5-coder-1.5b --device cpu --threads 1 --tasks babi \\
        --babi ../shared/data/babi_en_1k/qa2_two-supporting-facts_test.txt \\
        ../shared/data/babi_en_1k/qa3_three-supporting-facts_test.txt \\
        --settings none,prompt-only --n-test 30 --sweep-n 0 --out benchmarks/results/acr_qwen_babi_cpu

GPU run on the capable model (docs/reports/fidelity.md, ## ACR):

    python benchmarks/acr.py --model qwen2.5-coder-1.5b --setting paper --n-test 200 --n-train 1200 \\
        --iterations 6 --sweep-n 20 --out benchmarks/results/acr-qwen
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ACR_SETTINGS = ("prompt-only", "w/o-router", "w/o-refactorer", "trained")
ALL_SETTINGS = ("none", *ACR_SETTINGS)
TRAINED_SETTINGS = ("w/o-router", "w/o-refactorer", "trained")
ROWS_FILE = "acr_rows.jsonl"
#: router/refactorer decisions kept in acr_trace.json
MAX_TRACE = 80
#: seed of the test tasks (the training tasks use 1)
TEST_SEED = 1000


class FixedRouter:
    """A `TextGenerator` that always selects `operator` (the operator sweep bypasses the router)."""

    prompt_tokens = completion_tokens = 0

    def __init__(self, operator: str):
        self.operator = operator

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        return json.dumps({"analysis": f"operator sweep: {self.operator} forced", "drift_detected": True,
                           "selected_operator": self.operator})


def _tokens(gens) -> int:
    return sum(getattr(g, "prompt_tokens", 0) + getattr(g, "completion_tokens", 0) for g in gens)


def evaluate(name, tasks, make_policy, solver, tokenizer, reward_fns, controller_gens, max_new_tokens, trace,
             temperature=0.0, done=None, sink=None):
    """Run `tasks` under one setting. `done` maps task ids to rows of an earlier run (reused, not rerun);
    `sink(row, trace_entry)` is called on each new row (the resumable rows file; the entry is None
    when the row added nothing to `trace`)."""
    from rhea.policies import Vanilla

    rows = []
    for task in tasks:
        if done and task.task_id in done:
            rows.append(done[task.task_id])
            continue
        before = _tokens(controller_gens)
        t0 = time.perf_counter()
        policy = make_policy(task) if make_policy else Vanilla(tokenizer=tokenizer)
        plan = policy.build(task.conversation, task.query)
        answer = solver.generate(plan.text_messages(), max_new_tokens=max_new_tokens, temperature=temperature)
        controller_tokens = _tokens(controller_gens) - before
        route = next((r for r in plan.decisions.records if r.get("event") == "acr_route"), None)
        refactor = next((r for r in plan.decisions.records if r.get("event") == "acr_refactor"), None)
        row = {"task_id": task.task_id, "kind": task.kind, "answer": answer, "gold": task.answer,
               **{k: fn(answer, task) for k, fn in reward_fns.items()},
               "context_tokens": plan.ledger.text_tokens, "full_history_tokens": plan.ledger.full_history_tokens,
               "controller_tokens": controller_tokens, "seconds": round(time.perf_counter() - t0, 2),
               "operator": route["selected_operator"] if route else "none",
               "router_valid": route["fallback_reason"] is None if route else None,
               "refactor_source": refactor["source"] if refactor else None}
        rows.append(row)
        entry = None
        if route is not None and len(trace) < MAX_TRACE:
            entry = {"setting": name, "task_id": task.task_id, "kind": task.kind, "query": task.query,
                     "gold": task.answer, "answer": answer, "route": route, "refactor": refactor}
            trace.append(entry)
        print(f"[acr bench] {name:28s} {task.task_id:18s} op={row['operator']:18s} src={row['refactor_source']} "
              f"em={row['em']:.0f} val={row['value']:.0f} ctx={row['context_tokens']} ctrl={controller_tokens} "
              f"{answer!r}", flush=True)
        if sink is not None:
            sink(row, entry)
    return summarize(rows), rows


def compare_with_none(rows: dict[str, list[dict]]) -> dict:
    """Each setting minus ``none`` on the same tasks: paired bootstrap difference and sign-flip p (EM, value)."""
    from rhea.eval.stats import paired_comparison

    if "none" not in rows:
        return {}
    base = {m: {r["task_id"]: r[m] for r in rows["none"]} for m in ("em", "value")}
    out = {}
    for name, setting_rows in rows.items():
        if name == "none" or name.startswith("sweep"):
            continue
        out[name] = {m: paired_comparison({r["task_id"]: r[m] for r in setting_rows}, base[m]).to_dict()
                     for m in ("em", "value")}
    return out


def load_rows(path: Path, run_key: dict | None = None, trace: list | None = None) -> dict[str, dict[str, dict]]:
    """Rows of an earlier run: setting -> task id -> row (their trace entries are appended to `trace`).
    A row written under another `run_key` (model, tasks, decoding budgets...) is an error, not
    silently mixed in."""
    done: dict[str, dict[str, dict]] = {}
    if path.exists():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            rec = json.loads(line)
            theirs = rec.get("run")
            if run_key is not None and theirs is not None and theirs != run_key:
                changed = sorted(k for k in set(theirs) | set(run_key) if theirs.get(k) != run_key.get(k))
                raise SystemExit(f"acr bench: {path} line {n} was written with other settings ({', '.join(changed)}: "
                                 f"{ {k: theirs.get(k) for k in changed} } vs { {k: run_key.get(k) for k in changed} }); "
                                 "pass --no-resume to start over or choose another --out")
            done.setdefault(rec["setting"], {})[rec["row"]["task_id"]] = rec["row"]
            if trace is not None and rec.get("trace"):
                trace.append(rec["trace"])
    return done


def parse_settings(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in ALL_SETTINGS]
    if bad or not names:
        raise SystemExit(f"acr bench: --settings {spec!r}: unknown {bad or 'empty list'}; choose from {','.join(ALL_SETTINGS)}")
    return [n for n in ALL_SETTINGS if n in names]


def summarize(rows: list[dict]) -> dict:
    from rhea.eval.fact_recall import wilson

    n = len(rows)
    em, val = sum(r["em"] for r in rows), sum(r["value"] for r in rows)
    routed = [r for r in rows if r["router_valid"] is not None]
    summary = {"n": n, "em": em / n, "em_ci95": list(wilson(int(em), n)), "value_accuracy": val / n,
               "value_accuracy_ci95": list(wilson(int(val), n)),
               "context_tokens": sum(r["context_tokens"] for r in rows) / n,
               "controller_tokens": sum(r["controller_tokens"] for r in rows) / n,
               "router_valid_rate": sum(bool(r["router_valid"]) for r in routed) / len(routed) if routed else None,
               "operators": {}, "refactor_sources": {}, "by_kind": {}}
    for r in rows:
        summary["operators"][r["operator"]] = summary["operators"].get(r["operator"], 0) + 1
        if r["refactor_source"] not in (None, "none"):
            per_op = summary["refactor_sources"].setdefault(r["operator"], {})
            per_op[r["refactor_source"]] = per_op.get(r["refactor_source"], 0) + 1
        k = summary["by_kind"].setdefault(r["kind"], {"n": 0, "em": 0.0, "value_accuracy": 0.0})
        k["n"] += 1
        k["em"] += r["em"]
        k["value_accuracy"] += r["value"]
    for k in summary["by_kind"].values():
        k["em"] /= k["n"]
        k["value_accuracy"] /= k["n"]
    return summary


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["settings"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    xs = list(range(len(names)))
    for offset, key, label in ((-0.2, "em", "EM"), (0.2, "value_accuracy", "value accuracy")):
        means = [results["settings"][n][key] for n in names]
        cis = [results["settings"][n][f"{key}_ci95"] for n in names]
        err = [[m - lo for m, (lo, hi) in zip(means, cis)], [hi - m for m, (lo, hi) in zip(means, cis)]]
        axes[0].bar([x + offset for x in xs], means, 0.4, yerr=err, capsize=3, label=label)
    axes[0].set_xticks(xs, names, rotation=20)
    axes[0].set_ylim(0, 1)
    axes[0].set_title("answer quality (95% Wilson intervals)")
    axes[0].legend()
    ctx = [results["settings"][n]["context_tokens"] for n in names]
    ctrl = [results["settings"][n]["controller_tokens"] for n in names]
    axes[1].bar(xs, ctx, label="solver context tokens")
    axes[1].bar(xs, ctrl, bottom=ctx, label="router+refactorer tokens")
    axes[1].set_xticks(xs, names, rotation=20)
    axes[1].set_title("tokens per question")
    axes[1].legend()
    tasks = "bAbI stories, one fact per turn" if results.get("tasks") == "babi" else "drift QA"
    fig.suptitle(f"ACR on {tasks} ({results['model']}, {results['n_test']} test tasks)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def tgse_config(args):
    from rhea.training.acr import TGSEConfig

    common = dict(output_dir=args.tgse_dir, base_model=args.model, reward=args.reward, seed=args.seed)
    if args.setting == "paper":
        cfg = TGSEConfig(**common)
    else:
        cfg = TGSEConfig.cpu_demo(**common, epochs=3, lr=1e-3, val_fraction=0.2, router_max_new_tokens=48,
                                  refactor_max_new_tokens=args.refactor_tokens, solver_max_new_tokens=args.solver_tokens)
    over = {}
    if args.iterations is not None:
        over["iterations"] = args.iterations
        over["phase2_iterations"] = min(cfg.phase2_iterations, max(0, args.iterations - 1))
    if args.n_train is not None and args.setting == "cpu":  # split the training tasks over the rounds
        its = over.get("iterations", cfg.iterations)
        over["seed_tasks"] = max(1, args.n_train // 2) if its > 1 else args.n_train
        over["tasks_per_iteration"] = max(1, (args.n_train - over["seed_tasks"]) // max(1, its - 1))
    return TGSEConfig.from_dict({**cfg.to_dict(), **over})


def trained_adapters(path: str) -> tuple[dict, dict]:
    """LoRA shape (``lora_r``, ``lora_alpha``) of the adapters saved in `path` (``router/`` and ``refactorer/``,
    as `ACRController.save_adapters` writes them) and what the TGSE run beside them recorded (its config,
    per-iteration history and pool sizes, from ``../state.json`` when there is one). Checked before the model loads."""
    root = Path(path)
    shapes = {}
    for name in ("router", "refactorer"):
        cfg_path = root / name / "adapter_config.json"
        if not cfg_path.is_file() or not (root / name / "adapter_model.safetensors").is_file():
            raise SystemExit(f"--adapters {path}: {name}/adapter_config.json and {name}/adapter_model.safetensors "
                             "not found (pass the adapters/ or best/ folder of a `rhea train-acr` output_dir)")
        peft_cfg = json.loads(cfg_path.read_text())
        shapes[name] = (int(peft_cfg["r"]), int(peft_cfg["lora_alpha"]))
    if shapes["router"] != shapes["refactorer"]:
        raise SystemExit(f"--adapters {path}: router and refactorer differ in LoRA shape {shapes}; "
                         "ACRController gives both adapters one rank")
    r, alpha = shapes["router"]
    provenance: dict = {"adapters": str(path)}
    state = root.parent / "state.json"
    if state.is_file():
        st = json.loads(state.read_text())
        pools = {p.stem: sum(1 for line in p.read_text().splitlines() if line.strip())
                 for p in sorted((root.parent / "pools").glob("*.jsonl"))}
        provenance.update(config=st.get("config"), history=st.get("history"), iterations=st.get("iteration"),
                          used_tasks=len(st.get("used_tasks", [])), pools=pools)
    return {"lora_r": r, "lora_alpha": alpha}, provenance


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="model-zoo name or path (qwen2.5-coder-1.5b on a GPU)")
    parser.add_argument("--setting", choices=("cpu", "paper"), default="cpu",
                        help="TGSE config: cpu = TGSEConfig.cpu_demo(); paper = the paper's defaults")
    parser.add_argument("--tasks", choices=("drift", "babi"), default="drift",
                        help="drift: templated facts corrected mid-conversation; babi: bAbI stories (--babi)")
    parser.add_argument("--babi", nargs="+", default=None, metavar="FILE",
                        help="bAbI task files for --tasks babi (test tasks; training tasks stay drift tasks)")
    parser.add_argument("--max-facts", type=int, default=20,
                        help="bAbI questions with more facts before them are skipped, not truncated")
    parser.add_argument("--settings", default=",".join(ALL_SETTINGS),
                        help="comma list of settings to run (TGSE runs only if a trained one is listed)")
    parser.add_argument("--n-test", type=int, default=12)
    parser.add_argument("--n-train", type=int, default=None,
                        help="training tasks (default: cpu 24; paper: what the config draws, 3800)")
    parser.add_argument("--iterations", type=int, default=None, help="TGSE rounds (default: cpu 4, paper 18)")
    parser.add_argument("--sweep-n", type=int, default=4, help="test tasks per operator in the operator sweep (0: skip)")
    parser.add_argument("--sweep-only", action="store_true",
                        help="run only the operator sweep; --settings still names the refactorers it uses "
                             "(prompt-only and/or a trained setting), whose own rows are not evaluated")
    parser.add_argument("--shard", default="0/1", metavar="I/N",
                        help="evaluate the settings on test tasks I, I+N, I+2N... only (the sweep is not split): "
                             "N processes into N --out folders, then merge their rows (see the module docstring)")
    parser.add_argument("--teacher", default="rules", help="'rules' or 'http(s)://host/v1#model'")
    parser.add_argument("--adapters", default=None, help="evaluate these trained adapters (dir with router/ and "
                        "refactorer/) instead of running TGSE")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--no-resume", action="store_true", help=f"ignore (and overwrite) the rows in --out/{ROWS_FILE}")
    parser.add_argument("--tgse-dir", default="/tmp/rhea-acr-bench-tgse")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")
    parser.add_argument("--reward", default="value_match", help="TGSE reward: exact_match (the paper's EM) or "
                        "value_match (the 135M model rarely answers with the bare value, so EM gives TGSE almost no signal)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="decoding temperature at evaluation (default: cpu 0 = greedy, paper 0.7)")
    parser.add_argument("--solver-tokens", type=int, default=8)
    parser.add_argument("--router-tokens", type=int, default=48)
    parser.add_argument("--refactor-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="prefill every prompt in full (by default each generator reuses the KV prefix its last "
                             "call shares with the next: the router's and refactorer's long instructions)")
    args = parser.parse_args(argv)
    if args.n_train is None:
        args.n_train = 24 if args.setting == "cpu" else None
    settings = parse_settings(args.settings)
    evaluated = [] if args.sweep_only else settings  # the settings whose own rows run (the sweep uses the rest too)
    if args.tasks == "babi" and not args.babi:
        parser.error("--tasks babi needs --babi FILE... (e.g. shared/data/babi_en_1k/qa2_two-supporting-facts_test.txt)")
    if args.babi and args.tasks != "babi":
        parser.error("--babi is only read with --tasks babi")
    try:
        shard = tuple(int(x) for x in args.shard.split("/"))
    except ValueError:
        shard = ()
    if len(shard) != 2 or not 0 <= shard[0] < shard[1]:
        parser.error(f"--shard {args.shard!r} must be I/N with 0 <= I < N, e.g. 0/2")
    if args.sweep_only and args.sweep_n < 1:
        parser.error("--sweep-only needs --sweep-n >= 1 (test tasks per operator)")

    import torch

    from rhea.agents.acr import ACRController, ACRPolicy
    from rhea.agents.acr.operators import ACTIVE_OPERATORS
    from rhea.agents.acr.tasks import babi_tasks, drift_tasks
    from rhea.eval.report import unpack_stored
    from rhea.modeling import load_base_model
    from rhea.training.acr import TGSE, clear_output, exact_match, teacher_from_spec, value_match

    cfg = tgse_config(args)  # bad settings and data fail before the model loads
    lora, provenance = (trained_adapters(args.adapters) if args.adapters
                        else ({"lora_r": cfg.lora_r, "lora_alpha": cfg.lora_alpha}, None))
    teacher = teacher_from_spec(args.teacher)
    n_train = args.n_train or cfg.seed_tasks + (cfg.iterations - 1) * cfg.tasks_per_iteration
    test = (babi_tasks(args.babi, args.n_test, seed=TEST_SEED, max_facts=args.max_facts) if args.tasks == "babi"
            else drift_tasks(args.n_test, seed=TEST_SEED))
    needs_trained = any(n in TRAINED_SETTINGS for n in settings)
    temperature = args.temperature if args.temperature is not None else (0.7 if args.setting == "paper" else 0.0)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / ROWS_FILE
    if args.no_resume:
        for stale in (rows_path, rows_path.with_name(ROWS_FILE + ".gz")):
            stale.unlink(missing_ok=True)
    unpack_stored(rows_path)  # a committed run is stored gzipped: unpacked before this run appends to it
    for name in ("acr.json", "acr_trace.json"):
        unpack_stored(out_dir / name)  # rewritten below: no stale gzipped copy beside the new file
    run_key = {"model": args.model, "tasks": args.tasks, "babi": [Path(b).name for b in args.babi or []],
               "max_facts": args.max_facts, "n_test_seed": TEST_SEED, "seed": args.seed, "temperature": temperature,
               "solver_tokens": args.solver_tokens, "router_tokens": args.router_tokens,
               "refactor_tokens": args.refactor_tokens}
    trace: list[dict] = []
    done = load_rows(rows_path, run_key, trace)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    t_start = time.perf_counter()
    base, tok = load_base_model(args.model, dtype=torch.bfloat16 if device == "cuda" else None)
    base.to(device)
    controller = ACRController(base, tok, **lora)
    cache = not args.no_prefix_cache
    solver = controller.generator(None, seed=args.seed, prefix_cache=cache)
    train = drift_tasks(n_train, seed=1)
    rewards = {"em": exact_match, "value": value_match}
    budgets = {"router_max_new_tokens": args.router_tokens, "refactor_max_new_tokens": args.refactor_tokens,
               "temperature": temperature}
    results = {"model": args.model, "device": device, "setting": args.setting, "tasks": args.tasks,
               "babi": args.babi, "max_facts": args.max_facts if args.tasks == "babi" else None,
               "settings_run": settings, "sweep_only": args.sweep_only, "shard": args.shard, "n_test": len(test), "n_train": len(train) if needs_trained else 0,
               "solver_max_new_tokens": args.solver_tokens, "prefix_cache": cache, **budgets, "settings": {}, "vs_none": {},
               "operator_sweep": {}, "tgse": None, "rows": {}}

    def write() -> None:
        results["vs_none"] = compare_with_none(results["rows"])
        results["seconds"] = round(time.perf_counter() - t_start, 1)
        (out_dir / "acr.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
        (out_dir / "acr_trace.json").write_text(json.dumps(trace, indent=1, ensure_ascii=False))

    def run(name, make_policy, gens):
        with rows_path.open("a", encoding="utf-8") as sink:
            def save(row, entry):
                sink.write(json.dumps({"setting": name, "run": run_key, "row": row, "trace": entry},
                                      ensure_ascii=False) + "\n")
                sink.flush()
            tasks = test[: args.sweep_n] if name.startswith("sweep") else test[shard[0]::shard[1]]
            summary, rows = evaluate(name, tasks,
                                     make_policy, solver, tok, rewards, gens, args.solver_tokens, trace, temperature,
                                     done=done.get(name), sink=save)
        results["rows"][name] = rows
        if not name.startswith("sweep"):
            results["settings"][name] = summary
        write()
        return summary

    def acr(router_gen, refactor_gen):
        return lambda task: ACRPolicy(router=router_gen, refactorer=refactor_gen, task=task.task, tokenizer=tok,
                                      **budgets)

    base_gens = [controller.generator(None, seed=args.seed, prefix_cache=cache),
                 controller.generator(None, seed=args.seed + 1, prefix_cache=cache)]
    if "none" in evaluated:
        run("none", None, [])
    if "prompt-only" in evaluated:
        run("prompt-only", acr(*base_gens), base_gens)

    refactorers = {"prompt-only": base_gens[1]} if "prompt-only" in settings else {}
    if needs_trained:
        if args.adapters:
            controller.load_adapters(args.adapters)
            results["tgse"] = provenance
        else:
            clear_output(cfg)
            t0 = time.perf_counter()
            tgse = TGSE(cfg, controller, teacher, train, solver=solver)
            out = tgse.run(resume=False)
            results["tgse"] = {"config": cfg.to_dict(), "seconds": round(time.perf_counter() - t0, 1),
                               "pools": out.pools, "stopped": out.stopped, "history": out.history,
                               "teacher": args.teacher}
            for pool, items in tgse.pools.items():  # a few verified TGSE instances for the trace
                for inst in items[:2]:
                    trace.append({"setting": "tgse-pool", "pool": pool, "task_id": inst.task_id,
                                  "iteration": inst.iteration, "operator": inst.operator,
                                  "router_target": inst.router_target, "refactor_target": inst.refactor_target,
                                  "refactored_by": inst.refactored_by, "reward_raw": inst.reward_raw,
                                  "reward_refactored": inst.reward_refactored, "tokens_raw": inst.tokens_raw,
                                  "tokens_refactored": inst.tokens_refactored})
        solver.reset_prefix_cache()  # TGSE trained the adapters the base generators ran with disabled
        for gen in base_gens:
            gen.reset_prefix_cache()
        trained_router = controller.generator("router", seed=args.seed + 2, prefix_cache=cache)
        trained_refactorer = controller.generator("refactorer", seed=args.seed + 3, prefix_cache=cache)
        refactorers["trained"] = trained_refactorer
        if "w/o-router" in evaluated:
            run("w/o-router", acr(base_gens[0], trained_refactorer), [base_gens[0], trained_refactorer])
        if "w/o-refactorer" in evaluated:
            run("w/o-refactorer", acr(trained_router, base_gens[1]), [trained_router, base_gens[1]])
        if "trained" in evaluated:
            run("trained", acr(trained_router, trained_refactorer), [trained_router, trained_refactorer])

    if args.sweep_n > 0:  # every operator through the model-driven refactorer, router bypassed
        for label, refactor_gen in refactorers.items():
            results["operator_sweep"][label] = {
                op: run(f"sweep/{label}/{op}", acr(FixedRouter(op), refactor_gen), [refactor_gen])
                for op in ACTIVE_OPERATORS}
    results["refactorer_runs_per_operator"] = _runs_per_operator(results, ACTIVE_OPERATORS)
    write()
    try:
        plot(results, out_dir / "acr.png")
    except ImportError as e:
        print(f"[acr bench] no PNG: matplotlib is missing ({e})")
    print(markdown_table(results))
    print("refactorer runs per operator:", json.dumps(results["refactorer_runs_per_operator"]))
    print(f"total {results['seconds']} s")
    return 0


def markdown_table(results: dict) -> str:
    """The settings as a markdown table, each ACR setting with its paired difference from ``none``."""
    lines = ["| setting | n | EM [95% CI] | value acc. [95% CI] | value vs none [95% CI], p | context tokens | "
             "controller tokens | router valid | operators |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in results["settings"].items():
        cmp = results.get("vs_none", {}).get(name, {}).get("value")
        vs = (f"{cmp['diff']:+.2f} [{cmp['low']:+.2f}, {cmp['high']:+.2f}], p = {cmp['p_value']:.3f}"
              if cmp and cmp.get("low") is not None else "—")
        lines.append(f"| {name} | {s['n']} | {s['em']:.2f} [{s['em_ci95'][0]:.2f}, {s['em_ci95'][1]:.2f}] | "
                     f"{s['value_accuracy']:.2f} [{s['value_accuracy_ci95'][0]:.2f}, {s['value_accuracy_ci95'][1]:.2f}] | "
                     f"{vs} | {s['context_tokens']:.0f} | {s['controller_tokens']:.0f} | "
                     f"{_fmt(s['router_valid_rate'])} | {s['operators']} |")
    return "\n".join(lines)


def _runs_per_operator(results: dict, operators) -> dict:
    """How often each refactorer (prompt-only: the base model; trained: the refactorer adapter) executed
    each operator, over the routed settings and the sweep, split by how its output was used."""
    settings = results["settings"]
    sources = {"prompt-only": [settings[n] for n in ("prompt-only", "w/o-refactorer") if n in settings]
               + list(results["operator_sweep"].get("prompt-only", {}).values()),
               "trained": [settings[n] for n in ("trained", "w/o-router") if n in settings]
               + list(results["operator_sweep"].get("trained", {}).values())}
    out = {}
    for label, summaries in sources.items():
        out[label] = {}
        for op in operators:
            merged: dict[str, int] = {}
            for s in summaries:
                for src, k in s["refactor_sources"].get(op, {}).items():
                    merged[src] = merged.get(src, 0) + k
            out[label][op] = {"runs": sum(merged.values()), **merged}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
