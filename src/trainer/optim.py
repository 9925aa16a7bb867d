"""The optimizer and the learning-rate schedule of the `optimizer` and `scheduler` groups."""

from __future__ import annotations

import math

import torch
from torch import nn

from trainer.config import OptimizerConfig, SchedulerConfig


def build_optimizer(cfg: OptimizerConfig, model: nn.Module) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov) or AdamW over every parameter of `model`."""
    if cfg.name == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=cfg.lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
        )
    return torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
    )


class WarmupCosine:
    """LR factor per epoch: linear warm-up over `warmup` epochs, then a cosine from 1 down to
    `floor` (eta_min / lr) at epoch `epochs`. A class, not a closure, so it is plain state."""

    def __init__(self, *, warmup: int, epochs: int, floor: float) -> None:
        self.warmup, self.epochs, self.floor = warmup, epochs, floor

    def __call__(self, epoch: int) -> float:
        if epoch < self.warmup:
            return (epoch + 1) / (self.warmup + 1)
        span = max(self.epochs - self.warmup, 1)
        t = min(epoch - self.warmup, span) / span
        return self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * t))


def build_scheduler(
    cfg: SchedulerConfig, optimizer: torch.optim.Optimizer, *, max_epochs: int
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The schedule, stepped once per epoch; None for scheduler=none."""
    if cfg.name == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.step_size, gamma=cfg.gamma)
    if cfg.name == "cosine":
        base = float(optimizer.param_groups[0]["lr"])
        factor = WarmupCosine(warmup=cfg.warmup_epochs, epochs=max_epochs, floor=cfg.eta_min / base)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return None
