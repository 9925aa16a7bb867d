"""Timed training steps shared by the benchmarks: one plain optimizer step and a timer that
waits for the device, so each figure includes the queued GPU work."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.loop import sync


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Forward, cross-entropy, backward, optimizer step: the work of one training step."""
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def time_steps(
    step: Callable[[], object], n: int, device: torch.device
) -> list[float]:  # seconds per step
    """Run `step` `n` times, synchronising the device around each, and return the durations."""
    times = []
    for _ in range(n):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return times
