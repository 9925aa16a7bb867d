"""The optimizer (with its kernel: fused, foreach or for-loop) and the learning-rate schedule of
the `optimizer` and `scheduler` groups."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import nn

from trainer.config.schema import ConfigError, OptimizerConfig, SchedulerConfig

log = logging.getLogger(__name__)
KERNEL_FLAGS = ("fused", "foreach")  # the param-group keys that choose the kernel


def kernel_flags(kernel: str, *, compiled_step: bool) -> dict[str, bool]:
    """torch.optim's keyword arguments for optimizer.kernel. auto: one fused kernel per step
    where torch has one for the device; under compile.optimizer foreach, whose ops Inductor
    fuses itself."""
    if kernel == "auto":
        kernel = "foreach" if compiled_step else "fused"
    return {"fused": {"fused": True}, "foreach": {"foreach": True}}.get(kernel, {"foreach": False})


def _make(cfg: OptimizerConfig, params: list, flags: dict[str, bool]) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=cfg.lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
            **flags,
        )
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        **flags,
    )


def build_optimizer(
    cfg: OptimizerConfig, model: nn.Module, *, compiled_step: bool = False
) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov) or AdamW over every parameter of `model`, with the kernel
    optimizer.kernel asks for; auto falls back to foreach (CUDA) or the for-loop where torch has
    no fused kernel for the parameters' device."""
    params = list(model.parameters())
    flags = kernel_flags(cfg.kernel, compiled_step=compiled_step)
    try:
        return _make(cfg, params, flags)
    except RuntimeError as err:  # torch: no fused kernel for these parameters' device
        if cfg.kernel != "auto":
            raise ConfigError(
                f"optimizer.kernel={cfg.kernel} cannot run here ({err}); use "
                "optimizer.kernel=auto, foreach or for-loop."
            ) from None
    on_cuda = all(p.device.type == "cuda" for p in params)
    log.info(
        "optimizer.kernel=auto: no fused kernel here; using %s",
        "foreach" if on_cuda else "for-loop",
    )
    return _make(cfg, params, {"foreach": on_cuda})


def kernel_name(optimizer: torch.optim.Optimizer) -> str:
    """fused | foreach | for-loop: the kernel `optimizer` steps with (summary.json)."""
    group = optimizer.param_groups[0]
    return "fused" if group.get("fused") else ("foreach" if group.get("foreach") else "for-loop")


def keep_kernel(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load an optimizer state_dict but keep this run's kernel choice (a GPU run's fused
    checkpoint resumes on a CPU, and the other way round)."""
    chosen = [{k: g[k] for k in KERNEL_FLAGS if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flags in zip(optimizer.param_groups, chosen, strict=True):
        group.update(flags)


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
