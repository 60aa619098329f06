"""Optimizer construction and learning-rate schedules as plain functions of the step."""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.config import TrainConfig


def noam(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def inverse_sqrt(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then decay with 1/sqrt(step)."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def constant(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then constant."""
    if warmup <= 0:
        return peak
    return peak * min(1.0, max(step, 1) / warmup)


class Plateau:
    """Reduce-on-plateau on top of linear warmup: scales the rate down when validation stalls."""

    def __init__(self, factor: float, patience: int, min_lr: float, higher_is_better: bool) -> None:
        self.factor, self.patience, self.min_lr = factor, patience, min_lr
        self.higher_is_better = higher_is_better
        self.scale = 1.0
        self.best: float | None = None
        self.bad = 0

    def observe(self, value: float, peak: float) -> None:
        """Record one validation result."""
        better = self.best is None or (value > self.best if self.higher_is_better else value < self.best)
        if better:
            self.best, self.bad = value, 0
            return
        self.bad += 1
        if self.bad > self.patience:
            self.scale = max(self.scale * self.factor, self.min_lr / peak)
            self.bad = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.best, self.bad = state["scale"], state["best"], state["bad"]


def learning_rate(step: int, cfg: TrainConfig, d_model: int, plateau: Plateau | None = None) -> float:
    """The base learning rate at update `step` (1-based)."""
    if cfg.schedule == "noam":
        return noam(step, d_model, cfg.warmup, cfg.noam_factor)
    if cfg.schedule == "inverse_sqrt":
        return inverse_sqrt(step, cfg.lr, cfg.warmup)
    rate = constant(step, cfg.lr, cfg.warmup)
    if cfg.schedule == "plateau" and plateau is not None:
        rate *= plateau.scale
    return rate


def _no_decay(name: str, param: nn.Parameter) -> bool:
    return param.ndim < 2 or "norm" in name or "embed" in name


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam/AdamW, no decay on biases, norms and embeddings, each group's `lr_scale` applied by the trainer."""
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        scale = 1.0
        for key, mult in cfg.lr_multipliers.items():
            if key in name:
                scale = mult
        decay = 0.0 if _no_decay(name, param) else cfg.weight_decay
        groups.setdefault((scale, decay), []).append(param)
    param_groups = [{"params": ps, "lr_scale": scale, "weight_decay": decay}
                    for (scale, decay), ps in sorted(groups.items())]
    # Adam's weight_decay is L2 added to the gradient; AdamW's is decoupled from it.
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    fused = all(p.is_cuda for group in param_groups for p in group["params"]) or None  # None: torch's default
    return cls(param_groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=fused)


def set_lr(optimizer: torch.optim.Optimizer, base_lr: float) -> None:
    """Apply the schedule's base rate to every group, times the group's multiplier."""
    for group in optimizer.param_groups:
        group["lr"] = base_lr * group["lr_scale"]
