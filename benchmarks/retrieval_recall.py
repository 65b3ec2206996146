"""Recall@k of the turn a question needs, on real multi-turn conversations: Rhea's scorers vs BM25.

Data (``--data``, the folder described by its SOURCES.md; nothing here is the project's own data):

* ``topiocqa``: the 110 TopiOCQA conversations in MemoChat's ``memochat_topiocqa_test_question.jsonl``
  (``writing_topiocqa`` rows: the conversation plus MemoChat's topic segmentation, which follows
  TopiOCQA's gold topic of each turn). A question is the first user turn of a segment whose topic
  the conversation already left once (a *topic return*, e.g. ``Mariah Carey -> Merry Christmas II
  You -> Mariah Carey``); the turns it needs are those of the earlier segment(s) on that topic.
* ``multiwoz`` / ``sgd``: the ConvLab-3 unified samples (10 dialogues each). A question is a user
  turn whose annotated dialogue state gains a slot value the user did *not* say in that turn
  (e.g. "book a taxi from the hotel" and the state's taxi departure becomes "acorn guest house");
  the turns it needs are the earlier turns whose text holds that value.

Each question is scored inside a *multi-session* history: the ``--sessions`` conversations before
it in its corpus (whole), then its own conversation up to the question. A turn is the (user,
assistant) pair; the question's own answer is never in the history.

Scorers (`rhea.memory.scoring`, the code the policy runs): ``latent`` = HCR max-cosine of the
shipped adapters' latents of the reply (centred as in their rhea_config.json), ``bm25`` (bm25s on
user + reply), ``dense`` (all-MiniLM-L6-v2 cosine on user + reply), reciprocal-rank fusions and
calibrated sums of those, and ``recency`` (latest turn first) as a floor. Reported with 95%
bootstrap intervals over questions: recall@1/3/5 (a hit = any needed turn in the top k), the
paired difference to BM25, and, for each tier rule, the raw/latent/dropped turns per query and the
share of questions whose needed turns were all dropped.

Latents are cached per text in ``--cache`` (resumable); compress runs on one thread.

    python benchmarks/retrieval_recall.py --data /work/shared/data
"""
from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rhea.memory.scoring import TierRule, assign_tiers, fuse, rank_order
from rhea.storage import output_file

SKIP_VALUES = {"yes", "no", "dontcare", "none", "free", "any", "true", "false"}


@dataclass
class Conv:
    source: str
    cid: str
    pairs: list[tuple[str, str]]


@dataclass
class Question:
    source: str
    conv: int          # index into its corpus
    turn: int          # pair index of the question in its conversation
    query: str
    needed: list[int]  # pair indices in its conversation
    why: str


@dataclass
class Episode:
    q: Question
    history: list[tuple[str, str]]
    needed: list[int]  # indices into history
    own_start: int     # where the question's own conversation starts in history
    extra: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- data
def load_topiocqa(data: Path) -> tuple[list[Conv], list[Question]]:
    path = data / "dialogue_corpora" / "memochat_topiocqa_test_question.jsonl"
    convs, qs = [], []
    for row in (json.loads(l) for l in path.read_text().splitlines() if l.strip()):
        if row["type"] != "writing_topiocqa":
            continue
        lines = re.findall(r"\(line (\d+)\) (user|bot): (.*)", row["text"])
        roles = [r for _, r, _ in lines]
        if len(lines) % 2 or roles[::2] != ["user"] * (len(lines) // 2) or roles[1::2] != ["bot"] * (len(lines) // 2):
            continue
        pairs = [(lines[i][2].strip(), lines[i + 1][2].strip()) for i in range(0, len(lines), 2)]
        ci = len(convs)
        convs.append(Conv("topiocqa", str(row["question_id"]), pairs))
        segs = json.loads(row["answer"])
        seen: dict[str, list[int]] = {}
        for si, s in enumerate(segs):
            start = (int(s["start"]) - 1) // 2
            end = (int(s["end"]) - 1) // 2
            if s["topic"] in seen and si > 0 and segs[si - 1]["topic"] != s["topic"] and 0 < start < len(pairs):
                needed = sorted({p for p in seen[s["topic"]] if p < start})
                if needed and needed[-1] < start - 0:  # an earlier, non-adjacent segment on the same topic
                    qs.append(Question("topiocqa", ci, start, pairs[start][0], needed,
                                       f"returns to topic {s['topic']!r} (earlier turns {needed})"))
            seen.setdefault(s["topic"], []).extend(range(start, end + 1))
    return convs, qs


def load_dst(data: Path, name: str) -> tuple[list[Conv], list[Question]]:
    path = data / "dst_corpora" / f"{name}_dummy_data.json"
    name = name.rstrip("0123456789")  # multiwoz21 -> multiwoz
    convs, qs = [], []
    for d in json.loads(path.read_text()):
        turns = d["turns"]
        pairs, states = [], []
        for i in range(0, len(turns) - 1, 2):
            if turns[i]["speaker"] != "user" or turns[i + 1]["speaker"] != "system":
                break
            pairs.append((turns[i]["utterance"], turns[i + 1]["utterance"]))
            states.append(turns[i].get("state") or {})
        ci = len(convs)
        convs.append(Conv(name, d["dialogue_id"], pairs))
        prev: dict = {}
        for t, state in enumerate(states):
            needed, why = set(), []
            for domain, slots in state.items():
                for slot, value in slots.items():
                    v = str(value).strip().lower()
                    if not v or v == str(prev.get(domain, {}).get(slot, "")).strip().lower():
                        continue
                    if v in SKIP_VALUES or len(v) < 3 or v in pairs[t][0].lower():
                        continue
                    mentions = [j for j in range(t) if v in (pairs[j][0] + " " + pairs[j][1]).lower()]
                    if mentions:
                        needed.update(mentions)
                        why.append(f"{domain}.{slot}={value!r} from turn(s) {mentions}")
            prev = state
            if needed and t > 0:
                qs.append(Question(name, ci, t, pairs[t][0], sorted(needed), "; ".join(why)))
    return convs, qs


def load_corpora(data: Path) -> dict[str, tuple[list[Conv], list[Question]]]:
    """The three corpora of `data` (the folder described by shared/data/SOURCES.md), each file checked first."""
    for sub in ("dialogue_corpora/memochat_topiocqa_test_question.jsonl", "dst_corpora/multiwoz21_dummy_data.json",
                "dst_corpora/sgd_dummy_data.json"):
        if not (data / sub).is_file():
            raise SystemExit(f"--data {data}: {sub} not found (pass the folder described by shared/data/SOURCES.md)")
    return {"topiocqa": load_topiocqa(data), "multiwoz": load_dst(data, "multiwoz21"), "sgd": load_dst(data, "sgd")}


def build_episodes(corpora: dict[str, tuple[list[Conv], list[Question]]], sessions: int, max_per_source: int,
                   seed: int, layout: str = "contiguous") -> list[Episode]:
    """``contiguous``: the `sessions` other conversations, then the question's own conversation up to it;
    ``returning``: the question's own conversation up to it, then the other sessions, then the question
    (the user comes back to an earlier conversation, so the needed turn is sessions away)."""
    rng = np.random.default_rng(seed)
    episodes = []
    for source, (convs, qs) in corpora.items():
        if max_per_source and len(qs) > max_per_source:
            qs = [qs[i] for i in sorted(rng.choice(len(qs), max_per_source, replace=False))]
        for q in qs:
            others: list[tuple[str, str]] = []
            for k in range(sessions, 0, -1):
                others.extend(convs[(q.conv - k) % len(convs)].pairs)
            own_pairs = convs[q.conv].pairs[: q.turn]
            if layout == "contiguous":
                hist, own = others + own_pairs, len(others)
            else:
                hist, own = own_pairs + others, 0
            episodes.append(Episode(q, hist, [own + j for j in q.needed], own))
    return episodes


# ----------------------------------------------------------------------------- scoring
def turn_text(pair: tuple[str, str]) -> str:
    return f"{pair[0]}\n{pair[1]}"


class LatentCache:
    """Latents of texts under the shipped adapters, computed once per text and kept on disk."""

    def __init__(self, path: Path, model_dir: str | None):
        self.path, self.model_dir, self.model = path, model_dir, None
        self.owner = self._owner()
        saved = torch.load(path) if path.is_file() else {"owner": self.owner, "latents": {}}
        if saved.get("owner") != self.owner:   # a file from another model (or one written before owners were kept)
            raise SystemExit(f"--cache {path} holds latents of {saved.get('owner', 'an unrecorded model')!r}, not of "
                             f"{self.owner!r}; pass another --cache for this model (or delete that file)")
        self.store: dict[str, torch.Tensor] = saved["latents"]

    def _owner(self) -> str:
        """Which latents these are: the directory and the hash of its weights and config."""
        import hashlib

        from rhea.modeling.loading import shipped_adapters

        d = Path(self.model_dir) if self.model_dir is not None else shipped_adapters("smollm2-135m")
        h = hashlib.sha256()
        for f in sorted(p for p in d.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".json")
                        and p.name != "README.md" and "tokenizer" not in p.parts):
            h.update(f.name.encode())
            h.update(f.read_bytes())
        return f"{d.resolve()}@{h.hexdigest()[:12]}"

    def _model(self):
        if self.model is None:
            from rhea.modeling import RheaForCausalLM, load_default_model

            self.model = (load_default_model()[0] if self.model_dir is None
                          else RheaForCausalLM.from_pretrained(self.model_dir)).eval()
        return self.model

    def config(self):
        from rhea.modeling.config import RheaConfig
        from rhea.modeling.loading import shipped_adapters

        return RheaConfig.load(self.model_dir if self.model_dir is not None else shipped_adapters("smollm2-135m"))

    @torch.no_grad()
    def fill(self, texts: list[str], batch: int = 16, log=print) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.store]
        t0 = time.perf_counter()
        for i in range(0, len(todo), batch):
            chunk = todo[i: i + batch]
            model = self._model()
            lat = model.score_view(model.compress(chunk)).float().cpu()  # what the latent scorer reads
            self.store.update(zip(chunk, lat.half()))
            if (i // batch) % 10 == 9 or i + batch >= len(todo):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                torch.save({"owner": self.owner, "latents": self.store}, self.path)
                log(f"  compressed {min(i + batch, len(todo))}/{len(todo)} texts ({time.perf_counter() - t0:.0f} s)")

    def __getitem__(self, text: str) -> torch.Tensor:
        return self.store[text].float()


def latent_scores(cache: LatentCache, query: str, texts: list[str], center) -> torch.Tensor:
    from rhea_kernels import turn_scores

    vq = cache[query]
    vk = torch.stack([cache[t] for t in texts])
    return turn_scores(vq[None], vk[None], center=center)[0].double()


FUSED = {
    "rrf(latent,bm25)": ("rrf", ("latent", "bm25")),
    "rrf(dense,bm25)": ("rrf", ("dense", "bm25")),
    "rrf(latent,dense,bm25)": ("rrf", ("latent", "dense", "bm25")),
    "zsum(latent,bm25)": ("zsum", ("latent", "bm25")),
    "zsum(dense,bm25)": ("zsum", ("dense", "bm25")),
    "zsum(latent,dense,bm25)": ("zsum", ("latent", "dense", "bm25")),
}


def score_episode(ep: Episode, cache: LatentCache, embedder, center, latent_texts: str) -> dict[str, torch.Tensor]:
    from rhea.backends.retrieval import BM25Retriever

    texts = [turn_text(p) for p in ep.history]
    comps = {
        "latent": latent_scores(cache, ep.q.query, [p[1] for p in ep.history] if latent_texts == "reply" else texts, center),
        "bm25": torch.tensor(BM25Retriever(texts).scores(ep.q.query), dtype=torch.float64),
    }
    # diagnostics of the latent read-out: raw cosine (the paper's rule) and the session's running-mean centre
    lat_texts = [p[1] for p in ep.history] if latent_texts == "reply" else texts
    out_diag = {"latent (raw cosine)": latent_scores(cache, ep.q.query, lat_texts, None)}
    seen = torch.cat([cache[t] for t in lat_texts] + [cache[ep.q.query]])
    out_diag["latent (running centre)"] = latent_scores(cache, ep.q.query, lat_texts, seen.mean(0))
    emb = embedder.encode([ep.q.query] + texts)
    comps["dense"] = torch.from_numpy(emb[1:] @ emb[0]).double()
    out = dict(comps)
    out.update(out_diag)
    out["recency"] = torch.arange(len(texts), dtype=torch.float64)
    for name, (fusion, parts) in FUSED.items():
        out[name] = fuse({c: comps[c] for c in parts}, fusion, rrf_k=60.0)
    return out


# ----------------------------------------------------------------------------- statistics
def bootstrap(values: np.ndarray, n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (n, len(values)))].mean(1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def spread(x) -> dict:
    x = np.asarray(x, dtype=float)
    return {"mean": round(float(x.mean()), 2), "std": round(float(x.std()), 2), "min": int(x.min()),
            "p10": float(np.quantile(x, 0.1)), "p90": float(np.quantile(x, 0.9)), "max": int(x.max())}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the shared data folder (holds dialogue_corpora/ and dst_corpora/)")
    p.add_argument("--model", default=None, help="Rhea directory whose latents are scored (default: the shipped adapters)")
    p.add_argument("--sessions", type=int, default=3, help="earlier whole conversations before the question's own")
    p.add_argument("--max-per-source", type=int, default=0, help="questions per source (0 = all)")
    p.add_argument("--latent-texts", choices=["reply", "turn"], default="reply",
                   help="what the latent scorer compresses per turn: the reply (what EpisodicMemory does) or user + reply")
    p.add_argument("--max-raw", type=int, default=5)
    p.add_argument("--max-latent", type=int, default=8)
    p.add_argument("--dense-floor", type=float, default=0.05)
    p.add_argument("--dense-high", type=float, default=0.6)
    p.add_argument("--recent-raw", type=int, nargs="*", default=[2, 3],
                   help="tier rules that also keep the last W turns raw (RheaConfig.recent_raw), one per W")
    p.add_argument("--latent-budgets", type=int, nargs="*", default=[],
                   help="also the rules 'budget 2*max_raw raw + M latent + last W' for each M (W from --recent-raw): "
                        "what a larger latent budget buys in needed turns kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "rhea" / "bench" / "retrieval_latents.pt"))
    p.add_argument("--out", default="benchmarks/results/retrieval_recall")
    p.add_argument("--versus", default=None,
                   help="an earlier run's JSON (same data and seed, another --model): paired R@5 differences per scorer")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    corpora = load_corpora(Path(args.data))
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    episodes = build_episodes(corpora, args.sessions, args.max_per_source, args.seed)
    print(f"{len(episodes)} questions: " + ", ".join(f"{s} {sum(e.q.source == s for e in episodes)}" for s in corpora))

    cache = LatentCache(Path(args.cache), args.model)
    cfg = cache.config()
    center = torch.tensor(cfg.latent_center) if cfg.latent_center is not None and cfg.latent_centering == "fixed" else None
    texts = sorted({e.q.query for e in episodes} | {(p[1] if args.latent_texts == "reply" else turn_text(p))
                                                   for e in episodes for p in e.history})
    cache.fill(texts)
    from rhea.backends.embedding import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    tier_rules = build_tier_rules(cfg, args)
    comp_of = {"latent": ("latent",), "bm25": ("bm25",), "dense": ("dense",), "recency": (),
               "latent (raw cosine)": (), "latent (running centre)": ()}
    comp_of.update({k: v[1] for k, v in FUSED.items()})

    layouts = {}
    for layout in ("contiguous", "returning"):
        eps = build_episodes(corpora, args.sessions, args.max_per_source, args.seed, layout)
        layouts[layout] = evaluate(eps, corpora, cache, embedder, center, cfg, args, tier_rules, comp_of)
    summary = {
        "data": str(data), "sessions": args.sessions, "latent_texts": args.latent_texts,
        "model": args.model or "shipped smollm2-135m adapters", "tau_low": cfg.tau_low, "tau_high": cfg.tau_high,
        "latent_centering": cfg.latent_centering, "max_raw": args.max_raw, "max_latent": args.max_latent,
        "dense_floor": args.dense_floor, "dense_high": args.dense_high,
        "n_questions": {s: sum(e.q.source == s for e in episodes) for s in corpora},
        "needed_turns_per_question": spread([len(e.needed) for e in episodes]),
        "seconds": round(time.perf_counter() - t0, 1),
        "layouts": layouts,
        "examples": [{"source": e.q.source, "query": e.q.query, "why": e.q.why, "needed": e.needed,
                      "history_turns": len(e.history)} for e in episodes[:: max(1, len(episodes) // 8)]],
    }
    if args.versus:
        summary["versus"] = versus(layouts, Path(args.versus), args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(summary, indent=2))
    plot(summary, output_file(out, ".png"), args)
    for layout, lay in layouts.items():
        print_table(layout, lay, args)
    for layout, cmp in summary.get("versus", {}).get("layouts", {}).items():
        print(f"== {layout}: R@5 of this model minus {summary['versus']['other']} (paired over questions)")
        for sc, c in cmp.items():
            print(f"{sc:>24} {c['this']:.3f} - {c['other']:.3f} = {c['diff']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"
                  f" p={c['p']:.3g}")
    print(f"wrote {output_file(out, '.json')} and .png in {summary['seconds']} s")


def versus(layouts: dict, other_path: Path, seed: int, k: int = 5) -> dict:
    """Paired R@k differences (this run minus `other_path`'s) per layout and latent-reading scorer."""
    from rhea.eval.stats import paired_comparison

    from rhea.eval.report import read_stored_json, stored_path

    if not stored_path(other_path).is_file():
        raise SystemExit(f"--versus {other_path}: no such file (a JSON written by this benchmark, or its .json.gz)")
    other = read_stored_json(other_path)
    out = {}
    for layout, lay in layouts.items():
        theirs = other.get("layouts", {}).get(layout, {}).get("ranks")
        if not theirs:
            raise SystemExit(f"--versus {other_path} has no per-question ranks for {layout!r}; rerun it with this version")
        res = {}
        for sc, ranks in lay["ranks"].items():
            if "latent" not in sc or sc not in theirs:
                continue
            if len(theirs[sc]) != len(ranks):
                raise SystemExit(f"--versus {other_path}: {len(theirs[sc])} questions against {len(ranks)}; same data and seed?")
            mine = {str(i): float(r <= k) for i, r in enumerate(ranks)}
            base = {str(i): float(r <= k) for i, r in enumerate(theirs[sc])}
            c = paired_comparison(mine, base, seed=seed)
            res[sc] = {"this": round(float(np.mean(list(mine.values()))), 3),
                       "other": round(float(np.mean(list(base.values()))), 3),
                       "diff": round(c.diff, 3), "ci95": [round(c.low, 3), round(c.high, 3)], "p": round(c.p_value, 4)}
        out[layout] = res
    return {"other": str(other_path), "k": k, "layouts": out}


def print_table(layout: str, lay: dict, args) -> None:
    allr = lay["results"]["all"]
    print(f"== {layout}: history {lay['history_turns']['mean']:.0f} turns, needed turn "
          f"{lay['needed_turn_distance']['mean']:.0f} turns back (mean)")
    print(f"{'scorer':>24} {'R@1':>6} {'R@3':>6} {'R@5':>6}  R@5-bm25 [95% CI]   threshold: kept/lost | budget: lost")
    for sc, e in allr.items():
        d = e.get("recall@5_minus_bm25")
        tr = e.get("tiers", {})
        th = tr.get("threshold")
        bu = tr.get(f"budget {args.max_raw} raw + {args.max_latent} latent")
        print(f"{sc:>24} {e['recall@1']['mean']:6.3f} {e['recall@3']['mean']:6.3f} {e['recall@5']['mean']:6.3f}  "
              + (f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f},{d['ci95'][1]:+.3f}]" if d else " " * 26)
              + (f"   {th['raw']['mean'] + th['latent']['mean']:.1f}/{th['needed_all_dropped']['mean']:.3f}" if th else "")
              + (f" | {bu['needed_all_dropped']['mean']:.3f}" if bu else ""))



def build_tier_rules(cfg, args) -> dict:
    """The tier rules every scorer is evaluated under, by name: the threshold and budget rules with and without the
    latent tier, each --recent-raw window on top, the library's default once the latent tier is on, and one rule per
    --latent-budgets M."""
    def rule(mode: str, raw: int, latent: int, latents: bool, recent: int = 0) -> TierRule:
        return TierRule(mode, cfg.tau_low, cfg.tau_high, args.dense_floor, args.dense_high, raw, latent, latents,
                        recent_raw=recent)

    raw, latent, wide = args.max_raw, args.max_latent, 2 * args.max_raw
    tier_rules = {
        "threshold": rule("threshold", raw, latent, True),
        "threshold, no latent tier": rule("threshold", raw, latent, False),
        f"budget {raw} raw + {latent} latent": rule("budget", raw, latent, True),
        f"budget {raw} raw, no latent tier": rule("budget", raw, latent, False),
        f"budget {wide} raw, no latent tier": rule("budget", wide, 0, False),
    }
    for w in args.recent_raw:  # the last w turns raw on top (RheaConfig.recent_raw), at the same and at a larger total
        tier_rules[f"threshold + last {w}, no latent tier"] = rule("threshold", raw, latent, False, w)
        for r in sorted({wide - w, wide}):
            tier_rules[f"budget {r} raw + last {w}, no latent tier"] = rule("budget", r, 0, False, w)
        # the library's default once the latent tier is on (RheaConfig: max_raw 10, max_latent 8, recent_raw 3)
        for m in [latent, *args.latent_budgets]:
            tier_rules[f"budget {wide} raw + {m} latent + last {w}"] = rule("budget", wide, m, True, w)
    return tier_rules


def evaluate(episodes, corpora, cache, embedder, center, cfg, args, tier_rules, comp_of) -> dict:
    """Recall, tiers and floor statistics of every scorer over `episodes`."""
    rows = []  # per (episode, scorer)
    all_scores = []
    needed_scores = {c: [] for c in ("latent", "bm25", "dense")}
    for ep in episodes:
        scores = score_episode(ep, cache, embedder, center, args.latent_texts)
        all_scores.append(scores)
        for c in needed_scores:
            needed_scores[c].append(float(max(scores[c][j] for j in ep.needed)))
        for name, s in scores.items():
            order = rank_order(s).tolist()
            best = min(order.index(j) for j in ep.needed) + 1
            row = {"source": ep.q.source, "scorer": name, "rank": best, "n_turns": len(ep.history),
                   "n_needed": len(ep.needed)}
            comps = {c: scores[c] for c in comp_of[name]}
            if comps:
                for rule_name, rule in tier_rules.items():
                    tiers = assign_tiers(s, comps, rule)
                    row[rule_name] = {"raw": tiers.count("raw"), "latent": tiers.count("latent"),
                                      "drop": tiers.count("drop"),
                                      "needed_all_dropped": all(tiers[j] == "drop" for j in ep.needed),
                                      "needed_kept_raw": any(tiers[j] == "raw" for j in ep.needed)}
            rows.append(row)

    scorers = list(dict.fromkeys(r["scorer"] for r in rows))
    sources = ["all"] + list(corpora)
    results: dict = {}
    bm25_hits = {}
    for src in sources:
        sel = [r for r in rows if src == "all" or r["source"] == src]
        res = {}
        for sc in ["bm25"] + [x for x in scorers if x != "bm25"]:  # bm25 first: the others are compared with it
            rs = [r for r in sel if r["scorer"] == sc]
            if not rs:
                continue
            entry = {"n_questions": len(rs)}
            for k in (1, 3, 5, 10):
                hits = np.array([r["rank"] <= k for r in rs], dtype=float)
                m, lo, hi = bootstrap(hits, seed=args.seed)
                entry[f"recall@{k}"] = {"mean": round(m, 3), "ci95": [round(lo, 3), round(hi, 3)]}
                if sc == "bm25":
                    bm25_hits[(src, k)] = hits
                elif (src, k) in bm25_hits:
                    d, dlo, dhi = bootstrap(hits - bm25_hits[(src, k)], seed=args.seed)
                    entry[f"recall@{k}_minus_bm25"] = {"mean": round(d, 3), "ci95": [round(dlo, 3), round(dhi, 3)]}
            entry["chance@5"] = round(float(np.mean([1 - np.prod([(r["n_turns"] - r["n_needed"] - i) / (r["n_turns"] - i)
                                                                   for i in range(min(5, r["n_turns"]))])
                                                     for r in rs])), 3)
            tiers = {}
            for rule_name in tier_rules:
                ts = [r[rule_name] for r in rs if rule_name in r]
                if not ts:
                    continue
                lost = np.array([t["needed_all_dropped"] for t in ts], dtype=float)
                m, lo, hi = bootstrap(lost, seed=args.seed)
                tiers[rule_name] = {
                    "raw": spread([t["raw"] for t in ts]), "latent": spread([t["latent"] for t in ts]),
                    "drop": spread([t["drop"] for t in ts]),
                    "dropped_share_of_turns": round(float(np.mean([t["drop"] / max(1, t["raw"] + t["latent"] + t["drop"])
                                                                   for t in ts])), 3),
                    "needed_all_dropped": {"mean": round(m, 3), "ci95": [round(lo, 3), round(hi, 3)]},
                    "needed_kept_raw": round(float(np.mean([t["needed_kept_raw"] for t in ts])), 3),
                }
            if tiers:
                entry["tiers"] = tiers
            res[sc] = entry
        results[src] = res
    # floors: where the needed turn's best score sits against each floor
    floors = {
        "latent >= tau_low": float(np.mean(np.array(needed_scores["latent"]) >= cfg.tau_low)),
        "bm25 > 0": float(np.mean(np.array(needed_scores["bm25"]) > 0)),
        **{f"dense >= {f}": float(np.mean(np.array(needed_scores["dense"]) >= f)) for f in (0.1, 0.2, 0.3, 0.4)},
    }
    # a floor sweep for the fused default: share of questions losing every needed turn vs share of turns dropped
    sweep = []
    for f in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3):
        lost, dropped = [], []
        for ep, sc in zip(episodes, all_scores):
            comps = {"dense": sc["dense"], "bm25": sc["bm25"]}
            rule = TierRule("threshold", cfg.tau_low, cfg.tau_high, f, max(f, args.dense_high), latents=False)
            tiers = assign_tiers(sc["rrf(dense,bm25)"], comps, rule)
            lost.append(all(tiers[j] == "drop" for j in ep.needed))
            dropped.append(tiers.count("drop") / len(tiers))
        sweep.append({"dense_floor": f, "needed_all_dropped": round(float(np.mean(lost)), 3),
                      "dropped_share_of_turns": round(float(np.mean(dropped)), 3)})
    ranks = {sc: [r["rank"] for r in rows if r["scorer"] == sc] for sc in scorers}  # per question, episode order
    return {"results": results, "ranks": ranks, "needed_passes_floor": {k: round(v, 3) for k, v in floors.items()},
            "dense_floor_sweep_rrf(dense,bm25)": sweep,
            "history_turns": spread([len(e.history) for e in episodes]),
            "needed_turn_distance": spread([len(e.history) - max(e.needed) for e in episodes])}


def plot(summary: dict, path: Path, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lays = summary["layouts"]
    names = list(lays["contiguous"]["results"]["all"])
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    ax = axes[0]
    y = np.arange(len(names))
    for off, (layout, color) in zip((-0.2, 0.2), (("contiguous", "tab:blue"), ("returning", "tab:green"))):
        res = lays[layout]["results"]["all"]
        m = np.array([res[n]["recall@5"]["mean"] for n in names])
        lo = m - np.array([res[n]["recall@5"]["ci95"][0] for n in names])
        hi = np.array([res[n]["recall@5"]["ci95"][1] for n in names]) - m
        ax.barh(y + off, m, 0.4, xerr=[lo, hi], color=color, alpha=0.8, label=layout)
    ax.axvline(lays["returning"]["results"]["all"]["bm25"]["recall@5"]["mean"], color="tab:orange", ls="--", lw=1,
               label="bm25 (returning)")
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("recall@5 of the needed turn (95% bootstrap CI)")
    ax.set_title(f"{sum(summary['n_questions'].values())} questions in multi-session histories", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    rows = lays["returning"]["results"]["all"]
    rules = ["threshold, no latent tier", f"budget {args.max_raw} raw, no latent tier"]
    show = [n for n in ("latent", "bm25", "dense", "zsum(dense,bm25)") if n in rows]
    data, labels = [], []
    for n in show:
        for rule in rules:
            t = rows[n]["tiers"][rule]
            data.append([t["raw"]["mean"], t["raw"]["p90"], t["raw"]["max"]])
            labels.append(f"{n}\n{rule.split(' ')[0].rstrip(',')}")
    x = np.arange(len(data))
    ax.bar(x - 0.25, [d[0] for d in data], 0.25, label="mean")
    ax.bar(x, [d[1] for d in data], 0.25, label="p90")
    ax.bar(x + 0.25, [d[2] for d in data], 0.25, label="max")
    ax.set_xticks(x, labels, fontsize=7, rotation=45)
    ax.set_ylabel("raw turns per query (latent tier off)")
    ax.set_title("per-query cost, returning layout: threshold vs budget", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
