"""The TGSE loop: teacher-guided self-evolving training of ACR's router and refactorer adapters.

One loop over iterations, each drawing unused tasks (`DriftTask`s: history, question, gold):

- **Phase I** (iteration 0, cold start): the teacher routes and refactors the seed tasks;
- **Phase II** (iterations 1..``phase2_iterations``): the student router (router adapter)
  samples an operator; the teacher refactors with probability ``p_teacher`` (annealed each
  iteration by ``p_teacher_decay`` down to ``p_teacher_min``), the student refactorer
  otherwise. With ``teacher_router_fallback`` (not in the paper; off by default) the teacher
  router is asked when the student picks none on a task the solver gets wrong;
- **Phase III** (later iterations): the local refactorer only (``p_teacher = 0``).

Hindsight verification: the solver answers from the raw history and from the refactored
one; the scorer (exact match by default) rewards both. Instances go to three pools, as
in the paper's Algorithm 1 (lines 9-15):

- *corrective*: R(Ĥ) ≥ R(H) + δ — router target: the operator; refactorer target: the
  refactored context; trained with loss weight ``corrective_weight`` (§4.3);
- *compressive*: |R(Ĥ) − R(H)| < δ with R(Ĥ) > 0 (Eq. 11: success preserved) while the
  context shrank by at least ``min_token_saving`` — the same targets;
- *regularization*: everything else, including a none decision (Ĥ = H) — router target: none.

A refactorer reply that breaks the ``<summary>`` contract yields no instance (there is no
verified refactoring target). After each iteration both adapters are updated
*incrementally* (training continues from their current weights) for ``epochs`` passes in
batches of ``batch_size`` on a mix of the pools in ``pool_ratios``; a held-out share of the
instances (``val_fraction``, by instance id) gives each module a validation loss for
per-module early stopping (``patience``, ``min_delta``; a stopped module keeps its best weights and is
not trained again). Everything needed to resume — iteration, used tasks, pools, adapters,
best scores — is written to ``output_dir`` after every iteration.

>>> cfg = TGSEConfig(output_dir="out", iterations=3, phase2_iterations=1)
>>> [cfg.phase(i) for i in range(3)], cfg.p_teacher(1), cfg.p_teacher(2)
(['I', 'II', 'III'], 1.0, 0.0)
>>> TGSEConfig().seed_tasks, TGSEConfig().lora_r, TGSEConfig.cpu_demo().seed_tasks
(400, 16, 12)
"""
from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rhea.agents.acr.controller import ADAPTERS, REFACTORER, ROUTER, ACRController
from rhea.agents.acr.errors import ACRConfigError, TGSEStateError
from rhea.agents.acr.operators import NONE, canonical_operator
from rhea.agents.acr.policy import apply_refactor, plan_history
from rhea.agents.acr.refactorer import Refactorer, refactor_messages
from rhea.agents.acr.router import Router, RouterDecision, router_messages
from rhea.agents.acr.tasks import DriftTask
from rhea.policies.vanilla import Vanilla
from rhea.training.acr.config import POOLS, TGSEConfig
from rhea.training.acr.rewards import get_reward
from rhea.training.data import IGNORE_INDEX, build_trajectory_samples, collate

STATE_FILE = "state.json"
#: below this many instances a module trains on all of them (no validation split yet)
MIN_POOL_FOR_VALIDATION = 5


# ---------------------------------------------------------------------------- instances
@dataclass
class Instance:
    """One verified example: router and/or refactorer SFT targets, and what the verification saw."""

    instance_id: str
    pool: str
    task_id: str
    iteration: int
    operator: str
    router_messages: list[dict]
    router_target: str
    refactor_messages: list[dict] | None = None
    refactor_target: str | None = None
    reward_raw: float = 0.0
    reward_refactored: float | None = None
    tokens_raw: int = 0
    tokens_refactored: int | None = None
    refactored_by: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _is_val(instance_id: str, fraction: float) -> bool:
    return fraction > 0 and (zlib.crc32(instance_id.encode()) % 1000) < fraction * 1000


def _none_target(analysis: str) -> str:
    return RouterDecision(analysis, False, NONE).to_json()


def _upgrade(inst: Instance) -> Instance:
    """An instance read from a pool file, older operator spellings rewritten to the paper's (DeprecationWarning)."""
    inst.operator = canonical_operator(inst.operator)
    try:
        target = json.loads(inst.router_target)
    except (TypeError, json.JSONDecodeError):
        return inst
    if isinstance(target, dict) and "selected_operator" in target:
        new = canonical_operator(target["selected_operator"])
        if new != target["selected_operator"]:
            inst.router_target = json.dumps({**target, "selected_operator": new}, ensure_ascii=False)
    return inst


# ---------------------------------------------------------------------------- the loop
@dataclass
class TGSEResult:
    iterations_run: int
    history: list[dict]
    pools: dict[str, int]
    stopped: dict[str, bool]
    seconds: float
    output_dir: str


def _log(message: str) -> None:
    print(message, flush=True)  # progress lines reach a log file as they happen, not when the buffer fills


class TGSE:
    """The TGSE loop over a controller, a teacher, a solver and a task list.

    controller: the `ACRController` whose adapters are trained; teacher: any `TextGenerator`;
    solver: the `TextGenerator` that answers (default: the controller's base model, adapters
    disabled); tasks: `DriftTask`s (drawn in order, each used once); reward: a callable
    ``(answer, task) -> float`` (default from ``config.reward``).
    """

    def __init__(self, config: TGSEConfig, controller: ACRController, teacher: Any, tasks: Sequence[DriftTask], *,
                 solver: Any = None, reward: Callable[[str, DriftTask], float] | None = None, log: Callable = _log):
        if not isinstance(controller, ACRController):
            raise TypeError(f"controller must be an ACRController, got {type(controller).__name__}")
        if not callable(getattr(teacher, "generate", None)):
            raise TypeError(f"teacher must be a TextGenerator (with .generate), got {type(teacher).__name__}")
        ids = [t.task_id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ACRConfigError("task ids must be unique (they record which tasks were used)")
        self.config, self.controller, self.teacher = config, controller, teacher
        self.tasks = list(tasks)
        self.solver = solver if solver is not None else controller.generator(None, seed=config.seed)
        self.reward = reward or get_reward(config.reward)
        self.log = log
        self.out = Path(config.output_dir)
        self.tokenizer = controller.tokenizer
        self._acc = None
        self._fresh_state()

    def _fresh_state(self) -> None:
        self.iteration = 0
        self.used: list[str] = []
        self.pools: dict[str, list[Instance]] = {p: [] for p in POOLS}
        self.best: dict[str, float | None] = {a: None for a in ADAPTERS}
        self.bad: dict[str, int] = {a: 0 for a in ADAPTERS}
        self.stopped: dict[str, bool] = {a: False for a in ADAPTERS}
        self.history: list[dict] = []

    # ------------------------------------------------------------------ persistence
    def save_state(self) -> None:
        """Adapters (latest), pools and state.json; state.json is written last, so a crash mid-save
        resumes from the previous iteration."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.controller.save_adapters(self.out / "adapters")
        pools_dir = self.out / "pools"
        pools_dir.mkdir(exist_ok=True)
        for pool, items in self.pools.items():
            (pools_dir / f"{pool}.jsonl").write_text("".join(json.dumps(i.to_dict(), ensure_ascii=False) + "\n" for i in items))
        state = {"format": "rhea-acr-tgse/1", "iteration": self.iteration, "used_tasks": self.used, "best": self.best,
                 "bad": self.bad, "stopped": self.stopped, "history": self.history, "config": self.config.to_dict()}
        tmp = self.out / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.out / STATE_FILE)

    def load_state(self) -> bool:
        """Resume from ``output_dir`` if it holds a state; False when there is none."""
        path = self.out / STATE_FILE
        if not path.is_file():
            return False
        try:
            state = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise TGSEStateError(f"{path} is corrupted ({e}); delete {self.out} to start over") from e
        if state.get("format") != "rhea-acr-tgse/1":
            raise TGSEStateError(f"{path} is not a TGSE state (format {state.get('format')!r})")
        known = {t.task_id for t in self.tasks}
        missing = [t for t in state["used_tasks"] if t not in known]
        if missing:
            raise TGSEStateError(f"{path} used tasks {missing[:3]} that are not in the task list; resume with the same tasks")
        self.controller.load_adapters(self.out / "adapters")
        self.iteration, self.used = int(state["iteration"]), list(state["used_tasks"])
        self.best, self.bad, self.stopped = dict(state["best"]), dict(state["bad"]), dict(state["stopped"])
        self.history = list(state["history"])
        for pool in POOLS:
            file = self.out / "pools" / f"{pool}.jsonl"
            lines = file.read_text().splitlines() if file.is_file() else []
            self.pools[pool] = [_upgrade(Instance(**json.loads(line))) for line in lines if line.strip()]
        return True

    # ------------------------------------------------------------------ one task
    def _answer(self, plan) -> str:
        return self.solver.generate(plan.text_messages(), max_new_tokens=self.config.solver_max_new_tokens,
                                    temperature=self.config.solver_temperature)

    def verify(self, task: DriftTask, decision: RouterDecision, refactorer: Refactorer, base_plan, turns):
        """(reward_refactored, tokens_refactored, refactor result) for `decision` on `task`."""
        result = refactorer.refactor(decision.selected_operator, turns, task.query, task.task, use_llm=True)
        if result.fallback_reason is not None or result.context is None:
            return None, None, result
        plan = apply_refactor(base_plan, task.conversation, task.query, decision, result, turns, tokenizer=self.tokenizer)
        return self.reward(self._answer(plan), task), plan.ledger.text_tokens, result

    def run_task(self, task: DriftTask, iteration: int, rng: random.Random) -> list[Instance]:
        """Route, refactor, verify in hindsight; the instances `task` yields for the pools."""
        cfg = self.config
        base_plan = Vanilla(tokenizer=self.tokenizer).build(task.conversation, task.query)
        turns = plan_history(base_plan, task.conversation)
        r_raw = self.reward(self._answer(base_plan), task)
        t_raw = base_plan.ledger.text_tokens
        phase = cfg.phase(iteration)
        temp = cfg.temperature
        teacher_router = Router(self.teacher, max_new_tokens=cfg.router_max_new_tokens, temperature=temp)
        student_router = Router(self.controller.generator(ROUTER, seed=rng.randrange(2**31)),
                                max_new_tokens=cfg.router_max_new_tokens, temperature=temp)
        use_teacher = phase == "I" or rng.random() < cfg.p_teacher(iteration)
        refactor_gen = self.teacher if use_teacher else self.controller.generator(REFACTORER, seed=rng.randrange(2**31))
        refactorer = Refactorer(refactor_gen, deterministic=False, max_new_tokens=cfg.refactor_max_new_tokens,
                                temperature=temp)
        decision = (teacher_router if phase == "I" else student_router).route(turns, task.task)
        if cfg.teacher_router_fallback and phase != "I" and decision.selected_operator == NONE and r_raw < 1.0:
            decision = teacher_router.route(turns, task.task)  # teacher guidance where the student idles (not in the paper)
        r_msgs = router_messages(turns, task.task)
        stem = f"{task.task_id}@{iteration}"
        by = "teacher" if use_teacher else "student"
        if decision.selected_operator == NONE:  # Algorithm 1: H^ = H, so R(H^) = R(H) and no compression -> B_reg
            return [Instance(f"{stem}:none", "regularization", task.task_id, iteration, NONE, r_msgs,
                             _none_target(decision.analysis if decision.valid and decision.analysis
                                          else "The history is clean and focused."),
                             reward_raw=r_raw, reward_refactored=r_raw, tokens_raw=t_raw, tokens_refactored=t_raw)]
        r_ref, t_ref, result = self.verify(task, decision, refactorer, base_plan, turns)
        if r_ref is None:
            return []  # the refactorer broke its contract: no verified target
        common = dict(task_id=task.task_id, iteration=iteration, operator=decision.selected_operator,
                      router_messages=r_msgs, reward_raw=r_raw, reward_refactored=r_ref, tokens_raw=t_raw,
                      tokens_refactored=t_ref, refactored_by=by)
        f_msgs = refactor_messages(decision.selected_operator, turns, task.task)
        target = f"<summary>{result.context}</summary>"
        if r_ref >= r_raw + cfg.delta:
            pool = "corrective"
        elif abs(r_ref - r_raw) < cfg.delta and r_ref > 0 and t_ref <= (1 - cfg.min_token_saving) * t_raw:
            pool = "compressive"
        else:  # Algorithm 1, line 14: everything else supervises none
            return [Instance(f"{stem}:reg", "regularization", **{**common, "operator": NONE},
                             router_target=_none_target(f"Refactoring with {decision.selected_operator} would not "
                                                        "help the next answer; keep the history."))]
        router_target = RouterDecision(decision.analysis or f"Drift: {decision.selected_operator} applies.", True,
                                       decision.selected_operator).to_json()
        return [Instance(f"{stem}:{pool}", pool, router_target=router_target, refactor_messages=f_msgs,
                         refactor_target=target, **common)]

    # ------------------------------------------------------------------ training
    def _mix(self, module: str, rng: random.Random) -> tuple[list[Instance], list[Instance]]:
        """(train, val) instances for `module`, train mixed by ``pool_ratios``."""
        cfg = self.config
        pools = POOLS if module == ROUTER else ("corrective", "compressive")
        usable = {p: [i for i in self.pools[p] if module == ROUTER or i.refactor_target] for p in pools}
        # hold instances out only once there are enough, so a tiny first pool is not all held out
        fraction = cfg.val_fraction if sum(map(len, usable.values())) >= MIN_POOL_FOR_VALIDATION else 0.0
        val = [i for p in pools for i in usable[p] if _is_val(i.instance_id, fraction)]
        train = {p: [i for i in usable[p] if not _is_val(i.instance_id, fraction)] for p in pools}
        weights = {p: float(cfg.pool_ratios.get(p, 0.0)) for p in pools}
        total_w = sum(weights[p] for p in pools if train[p]) or 1.0
        budget = min(cfg.max_train_instances, sum(len(v) for v in train.values()))
        chosen: list[Instance] = []
        for p in pools:
            if train[p] and weights[p] > 0:
                n = min(len(train[p]), max(1, round(budget * weights[p] / total_w)))
                chosen += rng.sample(train[p], n)
        return chosen[: cfg.max_train_instances], val

    def _samples(self, module: str, instances: list[Instance], *, with_weights: bool = False):
        trajectories, weights = [], []
        for i in instances:
            weights.append(self.weight(i))
            prompt = i.router_messages if module == ROUTER else i.refactor_messages
            target = i.router_target if module == ROUTER else i.refactor_target
            messages = [*prompt, {"role": "assistant", "content": target}]
            trajectories.append((messages, [False] * len(prompt) + [True]))
        sample_set = build_trajectory_samples(trajectories, self.tokenizer, max_length=self.config.max_length)
        for skip in sample_set.skipped:
            self.log(f"[acr tgse] {module}: skipped {skip.source}: {skip.reason}")
        if not with_weights:
            return sample_set.samples
        skipped = {int(s.source.split()[-1]) for s in sample_set.skipped}
        kept_weights = [w for n, w in enumerate(weights) if n not in skipped]
        return sample_set.samples, kept_weights

    def _loss(self, batch: dict, weights: Sequence[float] | None = None, *, divisor: int | None = None) -> torch.Tensor:
        """Sum over the batch of each sample's token-averaged loss times its weight (1 by default), divided by
        `divisor` (default: the batch size, i.e. the weighted mean). Logits are computed only from the first
        supervised position on (``logits_to_keep``): the prompt's positions never hold a label, and a full
        ``[B, L, vocab]`` float copy is most of a long sample's memory."""
        model = self.controller.peft_model
        device = next(model.parameters()).device
        labels = batch["labels"].to(device)
        supervised = (labels != IGNORE_INDEX).any(0).nonzero()
        first = max(int(supervised[0]), 1) if supervised.numel() else labels.size(1) - 1
        keep = labels.size(1) - first + 1  # positions first-1 .. L-1 predict labels first .. L-1 (and one past)
        logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                       logits_to_keep=keep).logits
        labels = labels[:, first:]
        logits = logits[:, -keep:-1].float()
        token = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                                  ignore_index=IGNORE_INDEX, reduction="none").view(labels.shape)
        mask = (labels != IGNORE_INDEX).float()
        per_sample = (token * mask).sum(1) / mask.sum(1).clamp(min=1)
        w = torch.ones_like(per_sample) if weights is None else torch.tensor(list(weights), dtype=per_sample.dtype,
                                                                              device=device)
        return (per_sample * w).sum() / (divisor or per_sample.numel())

    def weight(self, instance: Instance) -> float:
        """Loss weight of `instance`: ``corrective_weight`` for corrective instances (§4.3), else 1."""
        return self.config.corrective_weight if instance.pool == "corrective" else 1.0

    def val_loss(self, module: str, instances: list[Instance]) -> float | None:
        samples = self._samples(module, instances)
        if not samples:
            return None
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with self.controller.adapter(module), torch.no_grad():
            losses = [float(self._loss(collate([s], pad))) for s in samples]
        return sum(losses) / len(losses)

    def train_module(self, module: str, instances: list[Instance], rng: random.Random) -> list[float]:
        """Continue training adapter `module` (incremental update) on `instances`; per-step losses."""
        samples, weights = self._samples(module, instances, with_weights=True)
        if not samples:
            return []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        params = self.controller.adapter_parameters(module)
        model = self.controller.peft_model
        acc = self._accelerator()
        losses = []
        with self.controller.adapter(module):
            for p in params:
                p.requires_grad_(True)
            optimizer = acc.prepare_optimizer(torch.optim.AdamW(params, lr=self.config.lr))
            model.train()
            try:
                bs = self.config.batch_size
                for _ in range(self.config.epochs):
                    order = rng.sample(range(len(samples)), len(samples))
                    for start in range(0, len(order), bs):
                        idx = order[start:start + bs]
                        micro = self.config.micro_batch_size or len(idx)
                        total = 0.0
                        for m in range(0, len(idx), micro):  # gradient accumulation: the batch's gradient
                            part = idx[m:m + micro]
                            loss = self._loss(collate([samples[i] for i in part], pad), [weights[i] for i in part],
                                              divisor=len(idx))
                            acc.backward(loss)
                            total += float(loss.detach())
                        acc.clip_grad_norm_(params, 1.0)
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                        losses.append(total)
            finally:
                model.eval()
        return losses

    def _accelerator(self):
        # accelerate handles the backward (mixed precision, device) the same way rhea's Trainer does;
        # the model stays where the controller put it (the solver and routers share it between updates).
        if self._acc is None:
            from accelerate import Accelerator

            self._acc = Accelerator(cpu=next(self.controller.peft_model.parameters()).device.type == "cpu")
        return self._acc

    def _early_stop(self, module: str, val: float | None) -> str:
        if val is None:
            return "no validation instances yet"
        best = self.best[module]
        if best is None or val < best - self.config.min_delta:
            self.best[module], self.bad[module] = val, 0
            self.controller.save_adapters(self.out / "best", names=[module])
            return "improved"
        self.bad[module] += 1
        if self.bad[module] >= self.config.patience:
            self.stopped[module] = True
            self.controller.load_adapters(self.out / "best", names=[module])
            return f"stopped after {self.bad[module]} iterations without improvement (best weights restored)"
        return f"no improvement ({self.bad[module]}/{self.config.patience})"

    # ------------------------------------------------------------------ driver
    def run(self, *, resume: bool = True, max_iterations: int | None = None) -> TGSEResult:
        """Run (or resume) until ``config.iterations``, the tasks run out, or both modules stop.

        `max_iterations` bounds the iterations of *this call* (e.g. 1 to step the loop)."""
        cfg = self.config
        t0 = time.perf_counter()
        if not (resume and self.load_state()):
            if (self.out / STATE_FILE).exists():
                raise TGSEStateError(f"{self.out} already holds a TGSE run; resume it or choose another output_dir")
            self._fresh_state()
        ran = 0
        while self.iteration < cfg.iterations and not all(self.stopped.values()):
            if max_iterations is not None and ran >= max_iterations:
                break
            it = self.iteration
            rng = random.Random(cfg.seed * 7919 + it)
            want = cfg.seed_tasks if it == 0 else cfg.tasks_per_iteration
            todo = [t for t in self.tasks if t.task_id not in set(self.used)][:want]
            if not todo:
                self.log(f"[acr tgse] no unused tasks left after iteration {it - 1}")
                break
            t_it = time.perf_counter()
            new: list[Instance] = []
            for n, task in enumerate(todo, 1):
                got = self.run_task(task, it, rng)
                new += got
                self.used.append(task.task_id)
                self.log(f"[acr tgse] iteration {it}: task {n}/{len(todo)} {task.task_id}: "
                         + (", ".join(i.pool for i in got) or "no instance")
                         + f" ({time.perf_counter() - t_it:.0f} s)")
            for inst in new:
                self.pools[inst.pool].append(inst)
            record: dict[str, Any] = {"iteration": it, "phase": cfg.phase(it), "p_teacher": cfg.p_teacher(it),
                                      "tasks": len(todo), "new_instances": {p: sum(i.pool == p for i in new) for p in POOLS},
                                      "pool_sizes": {p: len(v) for p, v in self.pools.items()}}
            for module in ADAPTERS:
                if self.stopped[module]:
                    record[module] = {"status": "stopped earlier"}
                    continue
                train, val = self._mix(module, rng)
                losses = self.train_module(module, train, rng)
                v = self.val_loss(module, val)
                record[module] = {"train_instances": len(train), "val_instances": len(val), "steps": len(losses),
                                  "train_loss": sum(losses) / len(losses) if losses else None, "val_loss": v,
                                  "status": self._early_stop(module, v) if losses else "no training instances"}
            record["seconds"] = round(time.perf_counter() - t_it, 1)
            self.history.append(record)
            self.iteration = it + 1
            self.save_state()
            self.log(f"[acr tgse] {json.dumps(record)}")
            ran += 1
        return TGSEResult(ran, self.history, {p: len(v) for p, v in self.pools.items()}, dict(self.stopped),
                          time.perf_counter() - t0, str(self.out))


def teacher_from_spec(spec: str):
    """``rules`` → `RuleTeacher`; ``http(s)://host/v1#model`` → an OpenAI-compatible endpoint."""
    if spec == "rules":
        from rhea.agents.acr.teacher import RuleTeacher

        return RuleTeacher()
    match = re.match(r"^(https?://[^#]+)#(.+)$", spec)
    if match:
        from rhea.backends.llm import OpenAICompatibleGenerator

        return OpenAICompatibleGenerator(match.group(1), model=match.group(2))
    raise ACRConfigError(f"teacher={spec!r} must be 'rules' or 'http(s)://host/v1#model-name'")


def clear_output(config: TGSEConfig) -> None:
    """Delete a previous run's output directory (``rhea train-acr --fresh``)."""
    shutil.rmtree(config.output_dir, ignore_errors=True)
