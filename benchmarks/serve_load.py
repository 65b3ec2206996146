"""Load test of `rhea serve`: N concurrent conversations x M turns through the official `openai`
client on loopback, batched (``--max-batch N``) against one by one (``--max-batch 1``) in the
same run, plus the latent cache's hit/miss cost.

Each configuration is a fresh `rhea serve` process on the embedded model. Every conversation
runs in its own thread and gives its own code word ("My code word is ORCHID-3."); its later
messages name it again. Checks (the run fails on any): every turn of every conversation comes
back (nothing lost), and each reply's ``rhea`` object lists exactly that conversation's own past
user messages, in order (nothing mixed up between conversations). The number of requests is
N x M per configuration and run (--repeats runs each, in alternating order), each bounded by --request-timeout and the whole phase by --deadline.
503s (queue full) are counted; the client retries them after Retry-After. A last run gives the
batched server a queue smaller than the burst (--overload-queue), so 503s happen, and checks
that the retried requests are still all answered.

Latency is the client's wall time per request (p50/p95); throughput is requests and completion
tokens per second of the phase. The replies of the two configurations are compared (greedy;
batched rows are left-padded, which may change the last bits of a reply, see rhea/session/batch.py).
With --huge-turns N the run measures starvation instead, on one batched server: the small
conversations alone, then the same number of new conversations while one request carrying N past
turns is in flight (sent --huge-lead seconds before them); it reports the small requests' p50/p95
in both phases, the huge request's status, time and (when answered) its bounded plan, and the
bytes of latent files each phase wrote to the server's --cache-dir.

The cache phase times, on K replies, compressing a reply (a miss) against reading its latents
from memory and from the shared safetensors directory (hits).

    .venv/bin/python benchmarks/serve_load.py --conversations 4 --turns 3 --max-tokens 16
    # -> benchmarks/results/serve_load.json and .png
    .venv/bin/python benchmarks/serve_load.py --conversations 8 --turns 4 --huge-turns 2000 \\
        --out benchmarks/results/serve_starvation_2000_turn_request  # small p95 with/without one huge request
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from rhea.storage import output_file

ROOT = Path(__file__).resolve().parents[1]
SERVER_LOG = Path(tempfile.gettempdir()) / "rhea_serve_load.server.log"  # the servers' output, for a failed run
WORDS = ["ORCHID", "GRANITE", "PELICAN", "SAFFRON", "TUNDRA", "COBALT", "MAGNOLIA", "QUARTZ", "WALRUS", "EMBER",
         "FJORD", "JASPER", "LANTERN", "NEBULA", "OSPREY", "PRAIRIE"]
MAX_CONVERSATIONS = 64  # each code word also carries its conversation's number, so they stay distinct
QUESTIONS = ["What is the capital of France?", "Name a primary colour.", "What is two plus two?",
             "Say hello in one word.", "What do bees make?", "Name a planet.", "What is ice made of?"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, max_batch: int, max_tokens: int, threads: int, log: Path,
                 extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "rhea.cli", "serve", "--model", model, "--port", str(port), "--max-batch",
           str(max_batch), "--max-tokens", str(max_tokens), "--threads", str(threads), "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"rhea serve exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"rhea serve did not come up in 300 s; see {log}")


def health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        return json.loads(r.read())


def run_phase(port: int, model: str, n: int, m: int, max_tokens: int, request_timeout: float, deadline: float,
              word_offset: int = 0) -> dict:
    import httpx
    import openai

    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def count(response):
        with lock:
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    results: dict[int, dict] = {}
    stop_at = time.time() + deadline

    def conversation(k: int) -> None:
        word = f"{WORDS[(k + word_offset) % len(WORDS)]}-{k + word_offset}"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=8,
                               timeout=request_timeout, http_client=httpx.Client(event_hooks={"response": [count]}))
        messages, rows, errors = [], [], []
        for t in range(m):
            if time.time() > stop_at:
                errors.append(f"turn {t}: phase deadline passed")
                break
            text = f"My code word is {word}. Remember it." if t == 0 else \
                f"{QUESTIONS[(k + t) % len(QUESTIONS)]} (code word {word})"
            messages.append({"role": "user", "content": text})
            t0 = time.perf_counter()
            try:
                r = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                                   extra_body={"rhea": True})
            except Exception as e:  # noqa: BLE001 - recorded as lost
                errors.append(f"turn {t}: {type(e).__name__}: {e}")
                break
            seconds = time.perf_counter() - t0
            reply = r.choices[0].message.content
            obj = r.model_extra["rhea"]
            own = [msg["content"] for msg in messages[:-1] if msg["role"] == "user"]
            seen = [turn["user"] for turn in obj["turns"]]
            mixed = [turn["index"] for turn in obj["turns"]] != list(range(t)) or any(
                not own[i].startswith(s.rstrip("…")) for i, s in enumerate(seen))
            rows.append({"turn": t, "seconds": seconds, "completion_tokens": r.usage.completion_tokens,
                         "prompt_tokens": r.usage.prompt_tokens, "reply": reply, "mixed_up": mixed,
                         "tokens_fed": obj["tokens_fed"], "tokens_full_history": obj["tokens_full_history"]})
            messages.append({"role": "assistant", "content": reply})
        results[k] = {"word": word, "rows": rows, "errors": errors}

    t0 = time.perf_counter()
    threads = [threading.Thread(target=conversation, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    seconds = sorted(r["seconds"] for c in results.values() for r in c["rows"])
    done = len(seconds)
    q = statistics.quantiles(seconds, n=20, method="inclusive") if len(seconds) >= 2 else seconds * 19
    return {"conversations": [results[k] for k in range(n)], "wall_s": wall, "requests": done,
            "expected_requests": n * m, "lost": n * m - done,
            "mixed_up": sum(r["mixed_up"] for c in results.values() for r in c["rows"]),
            "p50_s": statistics.median(seconds) if seconds else None, "p95_s": q[18] if seconds else None,
            "requests_per_s": done / wall, "completion_tokens_per_s":
                sum(r["completion_tokens"] for c in results.values() for r in c["rows"]) / wall,
            "http_statuses": {str(k): v for k, v in sorted(statuses.items())}}


def cache_costs(model_name: str, k: int) -> dict:
    """Seconds per reply: compress (miss) vs memory hit vs shared-directory hit (a fresh store)."""
    import torch

    from rhea.modeling.loading import load_rhea_model
    from rhea.serve.cache import CachedCompress, LatentStore, adapter_digest

    model = load_rhea_model(model_name)
    digest = adapter_digest(model)
    texts = [f"Reply number {i}: the {WORDS[i % len(WORDS)].lower()} is kept in the archive, row {i}." * 3
             for i in range(k)]
    with tempfile.TemporaryDirectory() as d, torch.no_grad():
        store = LatentStore(model_name, digest, 4096, directory=d)
        compress = CachedCompress(model.compress, store, model.device)
        t = time.perf_counter()
        miss = compress(texts)
        t_miss = (time.perf_counter() - t) / k
        t = time.perf_counter()
        hit = compress(texts)
        t_mem = (time.perf_counter() - t) / k
        replica = CachedCompress(model.compress, LatentStore(model_name, digest, 4096, directory=d), model.device)
        t = time.perf_counter()
        disk = replica(texts)
        t_dir = (time.perf_counter() - t) / k
        assert torch.equal(miss, hit) and torch.equal(miss, disk) and replica.computed == 0
        size = sum(p.stat().st_size for p in Path(d).rglob("*.safetensors")) / k
    return {"replies": k, "miss_compress_s": t_miss, "hit_memory_s": t_mem, "hit_directory_s": t_dir,
            "bytes_per_entry": size, "latent_shape": list(miss.shape[1:])}


def huge_messages(turns: int) -> list[dict]:
    """A history of `turns` distinct short turns (each a fact and its acknowledgement) and a last question."""
    messages = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"Note {i}: the {WORDS[i % len(WORDS)].lower()} crate is on shelf {i}."},
                     {"role": "assistant", "content": f"Noted: shelf {i} holds the {WORDS[i % len(WORDS)].lower()} "
                                                      f"crate ({i})."}]
    return messages + [{"role": "user", "content": "Which shelf holds the walrus crate?"}]


def send_huge(port: int, model: str, turns: int, max_tokens: int, timeout: float, out: dict) -> None:
    """POST one request carrying `turns` past turns (plain HTTP, so a 400/413 is recorded as it comes);
    fills `out` with its status, seconds, and either the bounded answer's figures or the error body."""
    import httpx

    body = {"model": model, "messages": huge_messages(turns), "max_tokens": max_tokens, "rhea": {"trace": True}}
    out.update(messages=len(body["messages"]), body_bytes=len(json.dumps(body).encode()))
    t0 = time.perf_counter()
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=timeout)
    except Exception as e:  # noqa: BLE001 - recorded: no answer in time
        out.update(status=None, seconds=time.perf_counter() - t0, error=f"{type(e).__name__}: {e}")
        return
    out.update(status=r.status_code, seconds=time.perf_counter() - t0)
    data = r.json()
    if r.status_code == 200:
        obj = data["rhea"]
        dropped = next((rec for rec in obj.get("records", []) if rec.get("event") == "bounded_work"), None)
        out.update(reply=data["choices"][0]["message"]["content"], prompt_tokens=data["usage"]["prompt_tokens"],
                   tokens_full_history=obj["tokens_full_history"], tokens_fed=obj["tokens_fed"],
                   turns_in_plan=len(obj["turns"]), budget=obj.get("budget"), bounded_work=dropped)
    else:
        out.update(error=data.get("error"))


def _dir_bytes(directory: Path) -> tuple[int, int]:
    """(bytes of the files under `directory`, number of *.tmp files there)."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.name.endswith(".tmp") for p in files)


def starvation(args) -> dict:
    """One batched server: the small conversations alone (the baseline), then the same conversations
    again while one request carrying `--huge-turns` past turns is in flight. Latents go to a fresh
    --cache-dir, so the bytes each phase writes are measured on disk."""
    n_messages = 2 * args.huge_turns + 1
    with tempfile.TemporaryDirectory() as cache_dir:
        cache = Path(cache_dir)
        port = _free_port()
        extra = ["--cache-dir", cache_dir, "--max-messages", str(max(n_messages, 1000))]
        server = start_server(args.model, port, args.max_batch or args.conversations, args.max_tokens, args.threads,
                              SERVER_LOG, extra)
        try:
            run_phase(port, args.model, 1, 1, 2, args.request_timeout, args.deadline)  # warm-up
            before = _dir_bytes(cache)[0]
            alone = run_phase(port, args.model, args.conversations, args.turns, args.max_tokens,
                              args.request_timeout, args.deadline)
            alone.update(cache_dir_bytes_written=_dir_bytes(cache)[0] - before, load_avg=os.getloadavg()[0])
            print(f"small alone: {alone['requests']}/{alone['expected_requests']}, p50 {alone['p50_s']:.2f}s "
                  f"p95 {alone['p95_s']:.2f}s", flush=True)
            # the small conversations give new code words, so their replies are compressed anew in both phases
            huge: dict = {"turns": args.huge_turns}
            before = _dir_bytes(cache)[0]
            sender = threading.Thread(target=send_huge, args=(port, args.model, args.huge_turns, args.max_tokens,
                                                              args.request_timeout, huge))
            sender.start()
            time.sleep(args.huge_lead)  # the huge request is queued (or running) before the small ones start
            with_huge = run_phase(port, args.model, args.conversations, args.turns, args.max_tokens,
                                  args.request_timeout, args.deadline, word_offset=args.conversations)
            sender.join()
            with_huge.update(cache_dir_bytes_written=_dir_bytes(cache)[0] - before, load_avg=os.getloadavg()[0])
            h = health(port)
        finally:
            server.kill()
            server.wait(timeout=30)
        total, tmp_left = _dir_bytes(cache)
    print(f"small with a {args.huge_turns}-turn request in flight: {with_huge['requests']}/"
          f"{with_huge['expected_requests']}, p50 {with_huge['p50_s']:.2f}s p95 {with_huge['p95_s']:.2f}s; huge: "
          f"status {huge.get('status')} in {huge.get('seconds', 0):.1f}s", flush=True)
    ratio = with_huge["p95_s"] / alone["p95_s"] if alone["p95_s"] and with_huge["p95_s"] else None
    return {
        "setup": {"model": args.model, "conversations": args.conversations, "turns": args.turns,
                  "max_tokens": args.max_tokens, "huge_turns": args.huge_turns, "huge_lead_s": args.huge_lead,
                  "server_threads": args.threads, "max_batch": args.max_batch or args.conversations,
                  "server_options": extra[2:] + ["--cache-dir", "(a fresh temporary directory)"],
                  "policy": "rhea (default)", "cpu": f"{os.cpu_count()} cores {platform.machine()}",
                  "command": " ".join(sys.argv)},
        "small_alone": alone, "small_with_huge": with_huge, "huge": huge,
        "p95_with_over_without": ratio, "target": "small p95 with the huge request within 2x of without",
        "target_met": ratio is not None and ratio <= 2.0 and alone["lost"] == 0 and with_huge["lost"] == 0,
        "cache_dir_bytes_total": total, "tmp_files_left": tmp_left,
        "server": {"served": h["served"], "batches": h["batches"], "batched_rows": h["batched_rows"],
                   "requeued": h.get("requeued"), "cache": h["cache"]},
    }


def plot_starvation(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = ["small alone", "small with huge"]
    phases = [result["small_alone"], result["small_with_huge"]]
    x = range(len(names))
    axes[0].bar([i - 0.2 for i in x], [p["p50_s"] for p in phases], 0.4, label="p50")
    axes[0].bar([i + 0.2 for i in x], [p["p95_s"] for p in phases], 0.4, label="p95")
    axes[0].axhline(2 * phases[0]["p95_s"], color="k", ls="--", lw=1, label="2x p95 alone (target)")
    axes[0].set_xticks(list(x), names)
    axes[0].set_ylabel("seconds per small request")
    axes[0].legend()
    axes[0].set_title("small requests' latency (client wall time)")
    for i, p in enumerate(phases):
        secs = sorted(r["seconds"] for c in p["conversations"] for r in c["rows"])
        axes[1].plot(secs, [k / len(secs) for k in range(1, len(secs) + 1)], label=names[i])
    huge = result["huge"]
    if huge.get("seconds") is not None:
        axes[1].axvline(huge["seconds"], color="tab:red", ls=":", label=f"huge request: {huge.get('status')}")
    axes[1].set_xlabel("seconds")
    axes[1].set_ylabel("fraction of small requests answered")
    axes[1].legend()
    axes[1].set_title("latency distribution")
    s = result["setup"]
    fig.suptitle(f"rhea serve on {s['model']}: {s['conversations']} conversations x {s['turns']} turns, with and without "
                 f"one {s['huge_turns']}-turn request in flight, {s['cpu']}")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = result["phases"]
    names = list(phases)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    x = range(len(names))
    axes[0].bar([i - 0.2 for i in x], [phases[p]["p50_s"] for p in names], 0.4, label="p50")
    axes[0].bar([i + 0.2 for i in x], [phases[p]["p95_s"] for p in names], 0.4, label="p95")
    axes[0].set_xticks(list(x), names)
    axes[0].set_ylabel("seconds per request")
    axes[0].legend()
    axes[0].set_title("latency (client wall time)")
    axes[1].bar(names, [phases[p]["completion_tokens_per_s"] for p in names], color="tab:green", alpha=0.7)
    for i, p in enumerate(names):
        axes[1].plot([i] * len(phases[p]["tokens_per_s_per_run"]), phases[p]["tokens_per_s_per_run"], "k.",
                     label="one run" if i == 0 else None)
    axes[1].legend()
    axes[1].set_ylabel("completion tokens / s")
    axes[1].set_title(f"throughput (batched / one-by-one = {result['batched_over_one_by_one_throughput']:.2f}x)")
    c = result["cache"]
    axes[2].bar(["miss: compress", "hit: memory", "hit: directory"],
                [c["miss_compress_s"] * 1e3, c["hit_memory_s"] * 1e3, c["hit_directory_s"] * 1e3], color="tab:purple")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("ms per reply (log)")
    axes[2].set_title("latent cache")
    s = result["setup"]
    fig.suptitle(f"rhea serve on {s['model']}: {s['conversations']} conversations x {s['turns']} turns, "
                 f"{s['max_tokens']} new tokens, {s['repeats']} runs per configuration, {s['cpu']}")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=0, help="batched configuration (0: = --conversations)")
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument("--request-timeout", type=float, default=300.0)
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per phase at most")
    parser.add_argument("--overload-queue", type=int, default=2,
                        help="one more batched run with this --max-queue, below the burst size (0: skip)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration, alternating the order")
    parser.add_argument("--cache-replies", type=int, default=16)
    parser.add_argument("--huge-turns", type=int, default=0,
                        help="measure starvation instead: the small conversations alone, then again with one request "
                             "carrying this many past turns in flight (e.g. 2000); the server takes that many messages")
    parser.add_argument("--huge-lead", type=float, default=1.0,
                        help="seconds between sending the huge request and starting the small conversations")
    parser.add_argument("--out", default="benchmarks/results/serve_load")
    args = parser.parse_args()
    if not (1 <= args.conversations <= MAX_CONVERSATIONS and 1 <= args.turns <= 20 and 1 <= args.max_tokens <= 256
            and 1 <= args.repeats <= 5):
        parser.error(f"--conversations 1..{MAX_CONVERSATIONS}, --turns 1..20, --max-tokens 1..256 and --repeats 1..5 keep "
                     "the test bounded")
    if not 0 <= args.huge_turns <= 100_000 or not 0 <= args.huge_lead <= 60:
        parser.error("--huge-turns 0..100000 and --huge-lead 0..60 seconds keep the test bounded")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.huge_turns:
        result = starvation(args)
        output_file(out, ".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
        plot_starvation(result, out)
        print(f"small p95 with / without the huge request: {result['p95_with_over_without']:.2f}x (target <= 2x: "
              f"{'met' if result['target_met'] else 'NOT met'}); cache dir bytes written {result['cache_dir_bytes_total']}"
              f", *.tmp left {result['tmp_files_left']} -> {out}.json/.png")
        ok = all(p["lost"] == 0 and p["mixed_up"] == 0 for p in (result["small_alone"], result["small_with_huge"]))
        if not ok:
            print("FAIL: small requests lost or mixed up", file=sys.stderr)
        return 0 if ok else 1
    batch = args.max_batch or args.conversations
    configs = [("one-by-one", 1), (f"batched (max {batch})", batch)]
    runs, replies = [], {}
    for rep in range(args.repeats):  # alternate the order, so a change in machine load hits both alike
        for name, max_batch in (configs if rep % 2 == 0 else configs[::-1]):
            port, log = _free_port(), SERVER_LOG
            server = start_server(args.model, port, max_batch, args.max_tokens, args.threads, log, [])
            try:
                run_phase(port, args.model, 1, 1, 2, args.request_timeout, args.deadline)  # warm-up
                phase = run_phase(port, args.model, args.conversations, args.turns, args.max_tokens,
                                  args.request_timeout, args.deadline)
                h = health(port)
                phase["server"] = {"batches": h["batches"], "batched_rows": h["batched_rows"], "served": h["served"],
                                   "cache": h["cache"]}
            finally:
                server.kill()
                server.wait(timeout=30)
            phase.update(config=name, max_batch=max_batch, run=rep + 1, load_avg=os.getloadavg()[0])
            runs.append(phase)
            replies.setdefault(name, []).append([[r["reply"] for r in c["rows"]] for c in phase["conversations"]])
            print(f"{name} run {rep + 1}: {phase['requests']}/{phase['expected_requests']} requests, lost "
                  f"{phase['lost']}, mixed up {phase['mixed_up']}, p50 {phase['p50_s']:.2f}s p95 {phase['p95_s']:.2f}s, "
                  f"{phase['requests_per_s']:.3f} req/s, {phase['completion_tokens_per_s']:.2f} tok/s, batches "
                  f"{h['batches']} ({h['batched_rows']} rows), statuses {phase['http_statuses']}, load "
                  f"{phase['load_avg']:.1f}", flush=True)
    overload = None
    if args.overload_queue:  # a queue smaller than the burst: 503 + Retry-After, retried by the client, nothing lost
        port, log = _free_port(), SERVER_LOG
        server = start_server(args.model, port, batch, args.max_tokens, args.threads, log,
                              ["--max-queue", str(args.overload_queue)])
        try:
            run_phase(port, args.model, 1, 1, 2, args.request_timeout, args.deadline)
            overload = run_phase(port, args.model, args.conversations, args.turns, args.max_tokens,
                                 args.request_timeout, args.deadline)
        finally:
            server.kill()
            server.wait(timeout=30)
        overload.update(config=f"batched (max {batch}), --max-queue {args.overload_queue}", load_avg=os.getloadavg()[0])
        print(f"{overload['config']}: {overload['requests']}/{overload['expected_requests']} requests, lost "
              f"{overload['lost']}, mixed up {overload['mixed_up']}, p50 {overload['p50_s']:.2f}s p95 "
              f"{overload['p95_s']:.2f}s, statuses {overload['http_statuses']}", flush=True)
    phases = {}
    for name, _ in configs:
        mine = [r for r in runs if r["config"] == name]
        seconds = sorted(x["seconds"] for r in mine for c in r["conversations"] for x in c["rows"])
        tokens = sum(x["completion_tokens"] for r in mine for c in r["conversations"] for x in c["rows"])
        wall = sum(r["wall_s"] for r in mine)
        phases[name] = {"runs": len(mine), "requests": len(seconds), "lost": sum(r["lost"] for r in mine),
                        "mixed_up": sum(r["mixed_up"] for r in mine), "p50_s": statistics.median(seconds),
                        "p95_s": statistics.quantiles(seconds, n=20, method="inclusive")[18],
                        "requests_per_s": len(seconds) / wall, "completion_tokens_per_s": tokens / wall,
                        "tokens_per_s_per_run": [r["completion_tokens_per_s"] for r in mine]}
    a, b = (name for name, _ in configs)
    pairs = [(x, y) for ra, rb in zip(replies[a], replies[b]) for ca, cb in zip(ra, rb) for x, y in zip(ca, cb)]
    result = {
        "setup": {"model": args.model, "conversations": args.conversations, "turns": args.turns,
                  "max_tokens": args.max_tokens, "repeats": args.repeats, "server_threads": args.threads,
                  "policy": "rhea (default)", "cpu": f"{os.cpu_count()} cores {platform.machine()}",
                  "command": " ".join(sys.argv)},
        "phases": phases,
        "runs": runs,
        "overload": overload,
        "batched_over_one_by_one_throughput": phases[b]["completion_tokens_per_s"] / phases[a]["completion_tokens_per_s"],
        "batched_over_one_by_one_p50": phases[b]["p50_s"] / phases[a]["p50_s"],
        "identical_replies": {"same": sum(x == y for x, y in pairs), "compared": len(pairs),
                              "note": "greedy; batched rows are left-padded, which can change a reply's last bits, "
                                      "and one differing reply changes that conversation's later prompts"},
        "cache": cache_costs(args.model, args.cache_replies),
    }
    output_file(out, ".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    plot(result, out)
    c = result["cache"]
    print(f"throughput batched/one-by-one {result['batched_over_one_by_one_throughput']:.2f}x; identical replies "
          f"{result['identical_replies']['same']}/{result['identical_replies']['compared']}; cache per reply: miss "
          f"{c['miss_compress_s'] * 1e3:.1f} ms, memory hit {c['hit_memory_s'] * 1e3:.3f} ms, directory hit "
          f"{c['hit_directory_s'] * 1e3:.2f} ms -> {out}.json/.png")
    ok = all(r["lost"] == 0 and r["mixed_up"] == 0 for r in runs + ([overload] if overload else []))
    if not ok:
        print("FAIL: requests lost or mixed up", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
