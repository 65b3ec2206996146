"""`rhea bench`: run evaluation suites for several context policies and write results + plots."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _policies(value: str) -> list[str]:
    from rhea.policies import available_policies
    from rhea.eval.runner import DEFAULT_POLICIES

    if value == "default":
        return list(DEFAULT_POLICIES)
    if value == "all":
        return available_policies()
    names = _split(value)
    if not names:
        from rhea.eval.runner import BenchError

        raise BenchError(f"--policies {value!r} names no policy; pass a comma list of {available_policies()}, "
                         "'default' or 'all'")
    unknown = [n for n in names if n not in available_policies()]
    if unknown:  # before the model loads, not after
        from rhea.eval.runner import BenchError

        raise BenchError(f"unknown policies {unknown}; choose from {available_policies()}, 'default' or 'all'")
    return names


def _suites(value: str) -> list[str]:
    from rhea.eval.suites import list_suites

    names = list_suites() if value == "all" else _split(value)
    if not names:
        from rhea.eval.runner import BenchError

        raise BenchError(f"--suite {value!r} names no suite; pass one of {list_suites()}, a comma list, or 'all'")
    return names


def _check_anchor_bias(args) -> None:
    """--anchor-bias: a finite number >= 0, checked before the model loads."""
    import math

    from rhea.eval.runner import BenchError

    beta = args.anchor_bias
    if beta is not None and not (math.isfinite(beta) and 0.0 <= beta <= 100.0):
        raise BenchError(f"--anchor-bias {beta} must be a number from 0 to 100 (the bias added to the instruction "
                         "block's attention logits, e.g. 1.0; 0 is plain attention)")


def _check_thresholds(args, policies: list[str]) -> None:
    """--tau-low/--tau-high: finite, for a policy that reads them, and ordered (a missing one is
    the model's own value), checked before the model loads and before --out is written."""
    import math

    from rhea.eval.runner import BenchError
    from rhea.policies import available_policies, policy_class

    given = {k: v for k, v in (("tau-low", args.tau_low), ("tau-high", args.tau_high)) if v is not None}
    if not given:
        return
    for flag, value in given.items():
        if not math.isfinite(value):
            raise BenchError(f"--{flag} {value} must be a finite number (a score threshold, e.g. 0.4)")
        if not -1.0 <= value <= 1.0:
            raise BenchError(f"--{flag} {value} must be a cosine threshold from -1 to 1 (e.g. 0.4)")
    takers = [p for p in available_policies() if policy_class(p).thresholds]
    if not any(p in takers for p in policies):
        flags = " and ".join(f"--{f}" for f in given)
        raise BenchError(f"{flags} only apply to the rhea policies ({', '.join(takers)}), and --policies "
                         f"{args.policies} has none; drop {flags} or add rhea to --policies")
    from rhea.modeling.loading import check_model_path, peek_rhea_config

    check_model_path(args.model)
    own = peek_rhea_config(args.model)
    low = args.tau_low if args.tau_low is not None else own.tau_low
    high = args.tau_high if args.tau_high is not None else own.tau_high
    if low > high:
        which = ("--tau-low {} is above --tau-high {}".format(low, high) if len(given) == 2 else
                 f"--tau-low {low} is above {args.model}'s tau_high {high:g}" if "tau-low" in given else
                 f"--tau-high {high} is below {args.model}'s tau_low {low:g}")
        raise BenchError(f"{which}: tau_low must be <= tau_high (turns scoring below tau_low are dropped, above "
                         f"tau_high kept raw); pass --tau-low <= --tau-high")


#: The suites whose replies an LLM judge rates (`rhea bench` passes them the judge; `rhea judge` rates them later).
JUDGED_SUITES = ("long-horizon", "long-mt-bench-plus", "multi-session-qa")
#: Of those, the ones `rhea bench` judges with the offline default when no judge is named; multi-session-qa scores
#: its answers by rule (token F1, containment) and is judged for correctness only when a judge is named
#: (--judge-local MODEL, --judge-url), or afterwards by `rhea judge`.
AUTO_JUDGED_SUITES = ("long-horizon", "long-mt-bench-plus")
#: the offline judge `rhea bench` uses for long-horizon when it is installed and no other is named
#: (its agreement with MT-Bench's references is measured in docs/guides/evaluation.md)
DEFAULT_LOCAL_JUDGE = "qwen2.5-coder-1.5b"


def resolve_local_judge(value: str | None, *, judge_url: str | None, installed=None) -> str | None:
    """The local judge model for ``--judge-local VALUE``: ``auto`` (the default) is
    `DEFAULT_LOCAL_JUDGE` when no endpoint is named and that model is installed, else none;
    ``none`` is none; anything else is that model."""
    if value is None or value.lower() == "none":
        return None
    if value != "auto":
        return value
    if judge_url:
        return None
    if installed is None:
        from rhea.modeling.zoo import get_model

        def installed(name):
            return get_model(name).is_installed()
    return DEFAULT_LOCAL_JUDGE if installed(DEFAULT_LOCAL_JUDGE) else None


def _resolve_judge(args, command: str = "bench"):
    """The endpoint judge of ``--judge-url`` (a `Judge`), or None with ``args.judge_local`` set to the
    local judge's model name (None for no judge); `--judge-url` with a named local judge is an error."""
    from rhea.eval.runner import BenchError

    if args.judge_url and args.judge_local not in (None, "auto", "none"):
        raise BenchError("--judge-url and --judge-local both name a judge; pass one")
    if args.judge_url and args.judge_direct:
        raise BenchError("--judge-direct reads the rating from a local judge's probabilities, which an endpoint does "
                         "not give; drop --judge-direct or judge with --judge-local MODEL")
    asked = args.judge_local
    args.judge_local = resolve_local_judge(asked, judge_url=args.judge_url)
    if asked == "auto" and args.judge_local is not None:
        print(f"rhea {command}: replies are judged offline by {DEFAULT_LOCAL_JUDGE} (its ratings' agreement with "
              "MT-Bench's references 0.69 [0.50, 0.85], docs/guides/evaluation.md); --judge-local none skips the ratings, "
              "--judge-url names an endpoint instead.", file=sys.stderr)
    if not args.judge_url:
        return None
    from rhea.backends.llm import OpenAICompatibleGenerator
    from rhea.eval.judge import Judge

    return Judge(OpenAICompatibleGenerator(args.judge_url, model=args.judge_model),
                 max_new_tokens=args.judge_max_new_tokens or 2048)


def _local_judge(args, batch_size: int, model=None):
    """A `Judge` on ``args.judge_local`` (loaded unless `model` is given), adapters disabled; 256 new
    tokens by default: the setting of its measured agreement."""
    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import Judge
    from rhea.modeling.loading import load_rhea_model, resolve_dtype

    model = model if model is not None else load_rhea_model(args.judge_local, device=args.device,
                                                            dtype=resolve_dtype(args.dtype))
    return Judge(HFGenerator(model), max_new_tokens=args.judge_max_new_tokens or 256, batch_size=batch_size,
                 explain=not args.judge_direct)


def _cmd_judge(args) -> int:
    from rhea.eval.judge_run import judge_run, read_run
    from rhea.eval.runner import BenchError

    read_run(args.run)  # a folder that cannot be judged fails before any model loads
    judge = _resolve_judge(args, "judge")
    if judge is not None:
        judge.batch_size = args.batch
    elif args.judge_local:
        from rhea.modeling.loading import check_model_path

        check_model_path(args.judge_local)
        judge = _local_judge(args, args.batch)
    else:
        raise BenchError(f"no judge: `rhea models install {DEFAULT_LOCAL_JUDGE}` for the offline default, "
                         "--judge-local MODEL for another local model, or --judge-url URL --judge-model NAME")
    judge_run(args.run, judge, rejudge=args.rejudge, progress=not args.quiet,
              log=lambda line: print(f"rhea judge: {line}", file=sys.stderr))
    print((Path(args.run) / "summary.md").read_text())
    return 0


def _add_judge_arguments(parser, int_at_least) -> None:
    parser.add_argument("--judge-url", default=None,
                        help="OpenAI-compatible endpoint for the judge (long-horizon and long-mt-bench-plus ratings; "
                             "multi-session-qa correctness, judged only when a judge is named)")
    parser.add_argument("--judge-model", default="gpt-4", help="model name to ask the judge endpoint for")
    parser.add_argument("--judge-local", default="auto", metavar="MODEL",
                        help="judge replies offline with a local model (zoo name or path, adapters disabled); 'auto' "
                             f"(default): {DEFAULT_LOCAL_JUDGE} when installed and no --judge-url is given (`rhea bench` "
                             "judges multi-session-qa only with a named judge); 'none': no ratings. See "
                             "benchmarks/judge_agreement.py for how far to trust it")
    parser.add_argument("--judge-max-new-tokens", type=int_at_least(16, "judge tokens"), default=None,
                        help="tokens the judge may write before its rating: default 256 for a local judge (the "
                             "setting its agreement was measured with), 2048 for an endpoint (FastChat's)")
    parser.add_argument("--judge-direct", action="store_true",
                        help="a local judge rates without writing an explanation: the probability-weighted mean of its "
                             "ratings 1-10 after FastChat's prompt and 'Rating: [[' (multi-session-qa: the likelier of "
                             "CORRECT and WRONG), one prefill per rating (docs/guides/evaluation.md gives its agreement)")


def _cmd_bench(args) -> int:
    from rhea.eval.runner import BenchError, run_suite
    from rhea.policies import policy_class
    from rhea.eval.suites import get_suite

    suites, policies = _suites(args.suite), _policies(args.policies)
    _check_thresholds(args, policies)
    _check_anchor_bias(args)
    _check_index_arguments(args, suites)
    if args.data and len(suites) != 1:
        raise BenchError("--data names one suite's data file; run one --suite at a time with it")
    # per-suite options: {suite: {kwarg: value}}; an option for a suite not being run is an error
    suite_options = {"instruction-retention": {"n_instructions": args.n_instructions, "n_revoke": args.n_revoke,
                                               "schedule": args.schedule},
                     "state-tracking": {"n_keys": args.n_keys, "n_probes": args.n_probes},
                     "multi-session-qa": {"min_history_turns": args.min_history_turns, "haystack": args.haystack,
                                          "history_tokens": args.history_tokens},
                     "long-mt-bench-plus": {"conversations_per_episode": args.conversations_per_episode}}
    suite_kwargs_of: dict[str, dict] = {}
    for suite, options in suite_options.items():
        given = {k: v for k, v in options.items() if v is not None}
        if given and suite not in suites:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise BenchError(f"{flags} only applies to the {suite} suite, which this run does not include "
                             f"(--suite {args.suite}); drop the option or add {suite} to --suite")
        suite_kwargs_of[suite] = given
    policy_kwargs: dict[str, dict] = {}
    taus = {k: v for k, v in (("tau_low", args.tau_low), ("tau_high", args.tau_high)) if v is not None}
    if taus:
        policy_kwargs = {p: dict(taus) for p in policies if set(taus) <= set(policy_class(p).thresholds)}
    for policy, name, value in (parse_policy_option(o, policies) for o in args.policy_option or ()):
        policy_kwargs.setdefault(policy, {})[name] = value
    judge = None
    named = bool(args.judge_url) or args.judge_local not in (None, "auto", "none")
    judged = [s for s in suites if s in (JUDGED_SUITES if named else AUTO_JUDGED_SUITES)]
    if judged:
        judge = _resolve_judge(args)
    else:
        args.judge_local = None
    if judged and judge is None and not args.judge_local:
        print("rhea bench: no judge configured (--judge-url URL --judge-model NAME, any OpenAI-compatible "
              f"endpoint, or `rhea models install {DEFAULT_LOCAL_JUDGE}` for the offline default): "
              f"{', '.join(judged)} quality ratings are skipped (rate them later with `rhea judge`); the rule checks "
              "still run.", file=sys.stderr)
    from rhea.storage import check_writable_directory

    check_writable_directory(args.out, "--out")  # before the model loads: a run never fails to save at the end
    # build every suite once before loading the model, so bad options fail fast
    kwargs_of = {}
    for name in suites:
        kwargs = dict(suite_kwargs_of.get(name, {}))
        if name in judged and judge is not None:
            kwargs["judge"] = judge
        get_suite(name, path=args.data, **kwargs)
        kwargs_of[name] = kwargs

    from rhea.modeling.loading import load_rhea_model, resolve_dtype

    model = load_rhea_model(args.model, device=args.device, dtype=resolve_dtype(args.dtype))
    if args.anchor_bias is not None:
        model.set_anchor_bias(args.anchor_bias)
    if kwargs_of.get("multi-session-qa", {}).get("history_tokens") is not None:
        kwargs_of["multi-session-qa"]["tokenizer"] = model.tokenizer  # --history-tokens counts the model's tokens
    if args.judge_local and judged:
        # the judge runs the plain base model (adapters disabled); the same model when it is the one benched
        # K episodes' replies of a turn are rated in one batch
        local = _local_judge(args, args.batch_episodes, model if args.judge_local == args.model else None)
        for name in judged:
            kwargs_of[name]["judge"] = local
    if not getattr(model, "adapters_trained", False):
        print(f"rhea bench: note: {args.model}'s compress/generate adapters are untrained; latent tiers carry noise.",
              file=sys.stderr)
    out = Path(args.out)
    for name in suites:
        target = out / name if len(suites) > 1 else out
        print(f"rhea bench: {name} × {', '.join(policies)} → {target}", file=sys.stderr)
        results = run_suite(model, name, policies, n_turns=args.turns, seed=args.seed, n_episodes=args.episodes,
                            data=args.data, suite_kwargs=kwargs_of[name], max_new_tokens=args.max_new_tokens,
                            policy_kwargs=policy_kwargs, out=target, resume=not args.no_resume,
                            progress=not args.quiet, model_name=args.model, batch_episodes=args.batch_episodes)
        print((target / "summary.md").read_text())
        _index_run(args, model, results, target)
    return 0


def _check_index_arguments(args, suites: list[str]) -> None:
    """--run-id names one run: with several suites it would give their rows one id. --index must be a file path,
    and an index already there must read (a bad one fails now, not after hours of turns)."""
    from rhea.eval.results_index import ResultsIndexError, read_index

    if args.run_id is not None and len(suites) != 1:
        raise ResultsIndexError(f"--run-id {args.run_id!r} names one run, and --suite {args.suite} runs {len(suites)}; "
                                "run one suite at a time with --run-id, or drop it (each suite gets MODEL/SUITE/...)")
    if args.index is not None:
        path = Path(args.index)
        if path.is_dir():
            raise ResultsIndexError(f"--index {path} is a folder; give the index file, e.g. {path / 'index.jsonl'}")
        if path.exists():
            read_index(path)


def _index_run(args, model, results: dict, target: Path) -> None:
    """Write the run's rows to ``target/index.jsonl`` and, with --index, to that index too."""
    from datetime import datetime, timezone

    from rhea.eval.results_index import append_rows, rows_from_results
    from rhea.modeling.loading import shipped_adapters

    adapters = None
    if getattr(model, "adapters_trained", False):
        own = Path(args.model)
        adapters = own if (own / "rhea_config.json").is_file() else shipped_adapters(args.model)
    source = str(target)
    rows = rows_from_results(results, run_id=args.run_id, adapters=adapters, source=source, commit=_code_commit(),
                             date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    for index in [target / "index.jsonl"] + ([Path(args.index)] if args.index else []):
        append_rows(index, rows)
        print(f"rhea bench: {len(rows)} rows → {index}", file=sys.stderr)


def _code_commit() -> str | None:
    """The git commit of the rhea checkout that ran (None for an installed package or without git)."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None


def parse_policy_option(option: str, policies) -> tuple[str, str, Any]:
    """``"POLICY.NAME=VALUE"`` as (policy, name, value): the policy must be one of `policies` and
    NAME one of its constructor's parameters; VALUE is JSON when it parses, else the text.

    >>> parse_policy_option("rhea.recent_raw=0", ["vanilla", "rhea"])
    ('rhea', 'recent_raw', 0)
    >>> parse_policy_option("rhea.scorer=bm25", ["rhea"])
    ('rhea', 'scorer', 'bm25')
    """
    import inspect

    from rhea.eval.runner import BenchError
    from rhea.policies import policy_class

    head, sep, text = option.partition("=")
    policy, dot, name = head.strip().rpartition(".")
    if not sep or not dot or not policy or not name:
        raise BenchError(f"--policy-option {option!r}: write POLICY.NAME=VALUE, e.g. rhea.recent_raw=0")
    if policy not in policies:
        raise BenchError(f"--policy-option {option!r} names policy {policy!r}, which this run does not include "
                         f"(--policies {','.join(policies)})")
    cls = policy_class(policy)
    supplied = {"self", "tokenizer", cls.model_arg, cls.controller_arg}  # the session passes these
    params = [p for p in inspect.signature(cls.__init__).parameters if p not in supplied]
    if name not in params:
        raise BenchError(f"--policy-option {option!r}: {policy} takes no option {name!r}; its options are "
                         f"{', '.join(params)}")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or JSON that cannot be read): the text itself
        value = text
    param = inspect.signature(cls.__init__).parameters[name]
    default, annotation = param.default, param.annotation
    kinds = {k.strip() for k in annotation.split("|")} if isinstance(annotation, str) else set()
    numeric = (isinstance(default, (int, float)) and not isinstance(default, bool)) or (
        kinds and kinds <= {"int", "float", "None"} and kinds & {"int", "float"})
    boolean = isinstance(default, bool) or (kinds and kinds <= {"bool", "None"} and "bool" in kinds)
    if boolean and not isinstance(value, bool) and not (value is None and "None" in kinds):
        raise BenchError(f"--policy-option {option!r}: {policy}.{name} is true or false (default {default!r})")
    if numeric and not (value is None and "None" in kinds) and (
            isinstance(value, bool) or not isinstance(value, (int, float))):
        raise BenchError(f"--policy-option {option!r}: {policy}.{name} takes a number (default {default!r})")
    return policy, name, value


def register(sub) -> None:
    from rhea.modeling.loading import (_thread_count, add_device_argument, add_dtype_argument, add_threads_argument,
                                       int_at_least)

    bench = sub.add_parser(
        "bench", help="run evaluation suites for context policies; write results.json, summary.md and plots",
        description="Run a suite (instruction-retention, state-tracking, long-horizon, efficiency, multi-session-qa, "
                    "long-mt-bench-plus, mt-eval-recollection, or 'all') for each policy on a model. Resumable: run the "
                    "same command again to continue an interrupted run.")
    bench.add_argument("--suite", required=True, help="suite name, comma list, or 'all'")
    bench.add_argument("--policies", default="default",
                       help="comma list of policies, 'default' (vanilla,recent-k,bm25,summary,reply-soft-compress,"
                            "rhea) or 'all' (every registered policy)")
    bench.add_argument("--turns", type=int_at_least(1, "user turns per episode"), default=None, help="user turns per episode (default: the suite's)")
    bench.add_argument("--episodes", type=int_at_least(1, "episodes per suite"), default=None, help="episodes per suite (default: the suite's)")
    bench.add_argument("--seed", type=int_at_least(-2 ** 63, "seed", 2 ** 63 - 1), default=0)
    bench.add_argument("--model", default="smollm2-135m", help="model-zoo name, Rhea directory, or base model path")
    add_device_argument(bench)
    add_dtype_argument(bench)
    add_threads_argument(bench)
    bench.add_argument("--out", required=True, help="output directory (one sub-directory per suite with several)")
    bench.add_argument("--data", default=None, help="the suite's public data file (MT-Eval, IFEval, MT-Bench, ...)")
    bench.add_argument("--max-new-tokens", type=int_at_least(1, "reply length cap in tokens"), default=64)
    bench.add_argument("--batch-episodes", type=int_at_least(1, "episodes generated together"), default=1,
                       help="advance this many episodes of a policy together, their turns generated as one batch "
                            "(decoding K rows costs little more than one where it is memory-bound)")
    bench.add_argument("--n-instructions", type=int_at_least(1, "instructions per episode"), default=None, help="instruction-retention: instructions per episode")
    bench.add_argument("--n-revoke", type=int_at_least(0, "instructions revoked per episode"), default=None, help="instruction-retention: how many are revoked mid-way")
    bench.add_argument("--schedule", choices=("staggered", "upfront"), default=None,
                       help="instruction-retention: give instructions at varied turns (staggered, the default) "
                            "or all at turn 0 (upfront, the first design)")
    bench.add_argument("--n-keys", type=int_at_least(1, "keys tracked"), default=None,
                       help="state-tracking: keys (or people) tracked; each probe asks for every key set so far")
    bench.add_argument("--n-probes", type=int_at_least(1, "probes per episode"), default=None,
                       help="state-tracking: probes per episode (the last turn and random earlier ones)")
    bench.add_argument("--min-history-turns", type=int_at_least(0, "history turns per episode"), default=None,
                       help="multi-session-qa: concatenate conversations until an episode's history holds this many "
                            "turns (default 300 with --data; 0: one conversation per episode)")
    bench.add_argument("--haystack", default=None, metavar="PATH",
                       help="multi-session-qa: a chat file (UltraChat 'messages' or ShareGPT 'conversations', JSON "
                            "list or JSON lines) whose chats are placed between the evidence sessions, LongMemEval-"
                            "style, until the history holds --history-tokens tokens (the model's tokenizer); "
                            "seeded, each chat at most once per episode (reused across episodes), chats stating "
                            "the gold answer of a question asked left out. Too few chats for the target: an error "
                            "saying how many tokens they reached")
    bench.add_argument("--history-tokens", type=int_at_least(1, "history tokens per episode"), default=None,
                       help="multi-session-qa, with --haystack: the content tokens an episode's history reaches "
                            "(e.g. 20000)")
    bench.add_argument("--conversations-per-episode", type=int_at_least(1, "conversations per episode"), default=None,
                       help="long-mt-bench-plus: MT-Bench+ conversations concatenated into one session (default 5, "
                            "as SeCom builds Long-MT-Bench+)")
    bench.add_argument("--policy-option", action="append", metavar="POLICY.NAME=VALUE",
                       help="a constructor option of one policy, e.g. rhea-no-im.recent_raw=0 or rhea.scorer=bm25 "
                            "(VALUE is read as JSON, else as text); repeatable. A policy's options are recorded "
                            "in config.json; a new policy may bring its own into a folder of earlier runs")
    bench.add_argument("--tau-low", type=float, default=None, help="HCR drop threshold for the rhea policies")
    bench.add_argument("--tau-high", type=float, default=None, help="HCR raw-text threshold for the rhea policies")
    bench.add_argument("--anchor-bias", type=float, default=None, metavar="BETA",
                       help="the prefix-anchored attention's bias: BETA >= 0 is added to the instruction block's "
                            "attention logits in every layer (the model's config.anchor_bias; 0 is plain causal "
                            "attention). Recorded in config.json and the index rows' options")
    _add_judge_arguments(bench, int_at_least)
    bench.add_argument("--index", default=None, metavar="PATH",
                       help="also add this run's rows to the results index at PATH (e.g. "
                            "benchmarks/results/index.jsonl); they always go to OUT/index.jsonl. A row of the same "
                            "run id, policy, options and metric is replaced")
    bench.add_argument("--run-id", default=None, metavar="ID",
                       help="the run id of the index rows (default MODEL/SUITE/DTYPE-epN, e.g. "
                            "qwen2.5-coder-1.5b/state-tracking/bf16-ep8): say what varies, never when")
    bench.add_argument("--no-resume", action="store_true", help="start over even if --out holds a run")
    bench.add_argument("--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=_cmd_bench)

    judge = sub.add_parser(
        "judge", help="rate a finished long-horizon, long-mt-bench-plus or multi-session-qa run's replies afterwards",
        description="Rate every question reply of a finished `rhea bench` run with an LLM judge (long-horizon and "
                    "long-mt-bench-plus: FastChat's MT-Bench prompts, 1-10; multi-session-qa: LoCoMo's correctness "
                    "judge, CORRECT or WRONG) and rewrite its results.json, summary.md and plots as a judged run. "
                    "Resumable: ratings are kept in RUN/judge/ratings.jsonl as they are made; run it again to continue.")
    judge.add_argument("run", help="the --out folder of the run (holding results.json)")
    _add_judge_arguments(judge, int_at_least)
    judge.add_argument("--batch", type=int_at_least(1, "prompts judged together"), default=8,
                       help="prompts a local judge decodes as one batch (default 8)")
    judge.add_argument("--rejudge", action="store_true",
                       help="replace ratings made by another judge (inline or by an earlier rhea judge) instead of refusing")
    add_device_argument(judge)
    add_dtype_argument(judge)
    judge.add_argument("--threads", type=_thread_count, default=None,
                       help="torch CPU threads (default: torch's, one per core: the judge decodes a batch)")
    judge.add_argument("--quiet", action="store_true", help="no progress bar")
    judge.set_defaults(func=_cmd_judge)
