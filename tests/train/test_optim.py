"""The optimizer and the learning-rate schedule of the `optimizer` and `scheduler` groups."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from trainer.config.schema import OptimizerConfig, SchedulerConfig
from trainer.train.optim import WarmupCosine, build_optimizer, build_scheduler

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_optimizers_take_their_settings():
    model = nn.Linear(3, 2)
    sgd = build_optimizer(OptimizerConfig(lr=0.1, momentum=0.5, nesterov=True), model)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["momentum"] == 0.5 and sgd.param_groups[0]["nesterov"]
    adamw = build_optimizer(OptimizerConfig(name="adamw", lr=1e-3, betas=[0.8, 0.9]), model)
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.param_groups[0]["betas"] == (0.8, 0.9)


def test_cosine_with_warmup_reaches_eta_min():
    factor = WarmupCosine(warmup=2, epochs=6, floor=0.1)
    assert [factor(e) for e in (0, 1)] == pytest.approx([1 / 3, 2 / 3])
    assert factor(2) == pytest.approx(1.0)
    assert factor(6) == pytest.approx(0.1) and factor(9) == pytest.approx(0.1)
    optimizer = build_optimizer(OptimizerConfig(lr=0.5), nn.Linear(2, 2))
    cfg = SchedulerConfig(name="cosine", eta_min=0.05, warmup_epochs=0)
    scheduler = build_scheduler(cfg, optimizer, max_epochs=4)
    lrs = []
    for _ in range(4):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert build_scheduler(SchedulerConfig(), optimizer, max_epochs=4) is None


def test_step_schedule_and_its_state_is_plain():
    optimizer = build_optimizer(OptimizerConfig(lr=1.0), nn.Linear(2, 2))
    step = build_scheduler(
        SchedulerConfig(name="step", step_size=2, gamma=0.5), optimizer, max_epochs=5
    )
    for _ in range(4):
        optimizer.step()
        step.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)
    cosine = build_scheduler(SchedulerConfig(name="cosine"), optimizer, max_epochs=3)
    pickle.dumps(cosine.state_dict())  # no closures: plain state
