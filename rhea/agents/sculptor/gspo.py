"""The GSPO objective of the Sculptor paper's RL stage (section 3.2, Eqs. 1-3; Table 4).

Not run in rhea: training Sculptor-M3-RL took 128 H800 GPUs (Table 4), and even a small
model needs a GPU for rollouts. This module holds the objective and the paper's
configuration, tested on a tiny model, so that a run on a GPU has the parts it needs:

- `group_advantages` (Eq. 3): each rollout's reward, normalized within its group of G
  rollouts of the same query;
- `sequence_log_ratios` (Eq. 2): log s_i, the length-normalized sequence log-likelihood
  ratio over the tokens that carry loss;
- `gspo_loss` (Eq. 1): minus the clipped surrogate, averaged over sequences, plus the
  optional LM-regularization term;
- `token_logprobs`: per-token log-probabilities of a causal LM, the input of the above;
- `GSPOConfig`: Table 4's hyper-parameters as defaults.

With Algorithm 1 (`trajectory_instances`) one rollout gives several snapshots. The paper
propagates the rollout's reward to every snapshot ("The final reward is propagated to all
sub-trajectories within the same rollout"), so each snapshot is one sequence here, with its
rollout's advantage and its own incremental loss mask (|τ_i| in Eq. 2 = its loss tokens).

>>> import torch
>>> [round(a, 4) for a in group_advantages(torch.tensor([1.0, 0.0, -1.0, 0.0])).tolist()]
[1.4142, 0.0, -1.4142, 0.0]
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from rhea.errors import RheaConfigError


@dataclass(frozen=True)
class GSPOConfig:
    """Table 4 (GSPO training configuration) and the loop limits of section 4.2.

    `group_size` (G) and `rollout_temperature` are not given in the paper: they are this
    module's choices, to be reported with any run. `lm_regularization` is Table 4's
    "LM regularization 0.1"; the paper does not define it further, and `gspo_loss` reads it
    as the weight of the mean next-token NLL on the trained tokens.
    """

    learning_rate: float = 1e-6
    iterations: int = 200
    clip_low: float = 3e-4  # "Clip ratio (lower)": s is clipped at 1 - clip_low
    clip_high: float = 4e-4  # "Clip ratio (upper)": s is clipped at 1 + clip_high
    kl_coef: float = 0.0  # "KL penalty (α)": none
    lm_regularization: float = 0.1
    optimizer: str = "AdamW"
    max_sequence_tokens: int = 128_000
    max_tool_calls: int = 20  # "we cap tool steps at 20 per turn" (section 4.2)
    group_size: int = 8  # not in the paper
    rollout_temperature: float = 1.0  # not in the paper
    system_prompt: str = "unified"  # appendix D.2: the unified prompt is used in RL training

    def to_dict(self) -> dict:
        return asdict(self)


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Eq. 3: (r_i - mean(r)) / std(r) within one group; all zeros when every reward is equal.

    The std is the population std (the paper writes std without a correction).
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.dim() != 1 or rewards.numel() < 1:
        raise RheaConfigError(f"rewards must be a 1-d tensor of one group's rewards, got shape {tuple(rewards.shape)}")
    centered = rewards - rewards.mean()
    std = rewards.std(unbiased=False)
    if std < eps:
        return torch.zeros_like(rewards)
    return centered / std


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """log π(x_t | x_<t) for t = 1..T-1, shape (B, T-1): position t-1 holds token t's log-prob."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def sequence_log_ratios(logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 2 in log space: log s_i = (1/|τ_i|) Σ_t mask · (log π_θ - log π_θold), shape (B,)."""
    _check_shapes(logp_new, logp_old, mask)
    mask = mask.to(logp_new.dtype)
    lengths = mask.sum(-1)
    if (lengths <= 0).any():
        raise RheaConfigError("every sequence needs at least one loss token (mask has an all-zero row)")
    return ((logp_new - logp_old.detach()) * mask).sum(-1) / lengths


def gspo_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, *,
              clip_low: float = GSPOConfig.clip_low, clip_high: float = GSPOConfig.clip_high,
              lm_regularization: float = 0.0) -> tuple[torch.Tensor, dict]:
    """-J_GSPO (Eq. 1) over a batch of sequences, each with its advantage; returns (loss, stats).

    `lm_regularization` > 0 adds that weight times the mean NLL of the trained tokens under
    the current policy. stats: mean ratio, fraction of sequences clipped, the surrogate.
    """
    advantages = torch.as_tensor(advantages, dtype=logp_new.dtype, device=logp_new.device)
    if advantages.shape != logp_new.shape[:1]:
        raise RheaConfigError(f"advantages has shape {tuple(advantages.shape)}; expected one per sequence "
                              f"({logp_new.shape[0]},)")
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise RheaConfigError(f"clip_low={clip_low} must be in [0, 1) and clip_high={clip_high} >= 0")
    ratio = torch.exp(sequence_log_ratios(logp_new, logp_old, mask))
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    loss = -surrogate.mean()
    if lm_regularization:
        m = mask.to(logp_new.dtype)
        loss = loss + lm_regularization * (-(logp_new * m).sum() / m.sum())
    stats = {"ratio_mean": float(ratio.detach().mean()),
             "clip_fraction": float(((ratio < 1 - clip_low) | (ratio > 1 + clip_high)).float().mean()),
             "surrogate": float(surrogate.detach().mean())}
    return loss, stats


def _check_shapes(logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> None:
    if logp_new.dim() != 2 or logp_new.shape != logp_old.shape or logp_new.shape != mask.shape:
        raise RheaConfigError(f"logp_new {tuple(logp_new.shape)}, logp_old {tuple(logp_old.shape)} and mask "
                              f"{tuple(mask.shape)} must be the same (batch, tokens) shape")
