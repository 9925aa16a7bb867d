"""The training and evaluation loops: clipping, a resumable epoch, divergence, a padded last batch."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainer.config.schema import OptimizerConfig
from trainer.hardware import devices
from trainer.train.models import SmallCNN
from trainer.train.optim import build_optimizer
from trainer.train.step import (
    EpochControl,
    GracefulStop,
    Progress,
    StepRules,
    evaluate,
    train_epoch,
    train_step,
)

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def _loader(n=48, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)


def _train_objects(seed=0):
    torch.manual_seed(seed)
    model = SmallCNN(1, 3, width=4)
    optimizer = build_optimizer(OptimizerConfig(lr=0.05), model)
    return model, optimizer, devices.grad_scaler("32", CPU)


def test_train_step_clips_gradients(monkeypatch):
    model, optimizer, scaler = _train_objects()
    seen = []
    monkeypatch.setattr(nn.utils, "clip_grad_norm_", lambda params, norm: seen.append(norm))
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    loss, logits = train_step(model, optimizer, scaler, x, y, StepRules(CPU, torch.bfloat16, 0.5))
    assert seen == [0.5] and logits.shape == (4, 3) and loss.dtype == torch.float32
    assert all(p.grad is None for p in model.parameters())  # zeroed after the step


def test_train_epoch_stopped_midway_resumes_to_the_same_result():
    model, optimizer, scaler = _train_objects()
    whole = train_epoch(
        model, _loader(), optimizer, scaler, progress=Progress(), rules=StepRules(CPU),
        control=EpochControl(max_steps=None, stop=GracefulStop(), time_first_step=True),
    )  # fmt: skip
    assert whole.steps == 6 and whole.samples == 48 and whole.steady_steps == 5

    class StopAfter:
        def __init__(self, n):
            self.n = n

        @property
        def requested(self):
            self.n -= 1
            return self.n < 0

    model, optimizer, scaler = _train_objects()
    progress = Progress()
    first = train_epoch(
        model, _loader(), optimizer, scaler, progress=progress, rules=StepRules(CPU),
        control=EpochControl(max_steps=None, stop=StopAfter(2), time_first_step=False),
    )  # fmt: skip
    assert first is None and progress.batches_done == 3 and progress.partial["count"] == 24
    rest = train_epoch(
        model, _loader(), optimizer, scaler, progress=progress, rules=StepRules(CPU),
        control=EpochControl(max_steps=None, stop=GracefulStop(), time_first_step=False),
    )  # fmt: skip
    assert rest.samples == 48 and progress.partial == {}
    assert rest.loss == pytest.approx(whole.loss) and rest.acc == pytest.approx(whole.acc)


def test_diverged_training_says_how_to_fix_it():
    model, optimizer, scaler = _train_objects()
    optimizer.param_groups[0]["lr"] = float("inf")
    with pytest.raises(FloatingPointError, match="optimizer.lr"):
        for _ in range(3):
            train_epoch(
                model, _loader(), optimizer, scaler, progress=Progress(), rules=StepRules(CPU),
                control=EpochControl(max_steps=None, stop=GracefulStop(), time_first_step=False),
            )  # fmt: skip


def test_evaluate_counts_every_sample_of_a_padded_last_batch():
    model, _, _ = _train_objects()
    result = evaluate(model, _loader(n=20, batch=8), device=CPU, dtype=None, batch_size=8)
    assert result.samples == 20 and 0.0 <= result.acc <= 1.0 and math.isfinite(result.loss)
