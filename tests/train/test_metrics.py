"""The epoch row: exactly the logged names, compile time only where something compiled."""

from __future__ import annotations

import pytest
import torch

from trainer.config.schema import EPOCH_METRICS
from trainer.train.metrics import Timing, epoch_row

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_eager_runs_log_no_compile_time_whatever_the_first_step_noise():
    timing = Timing(compiled=False)
    timing.observe_train(first_step_s=0.02, steady_s=0.09, steady_steps=9)
    timing.observe_eval(first_batch_s=0.02, steady_batch_s=0.01)
    assert timing.compile_s() == 0.0
    assert "compiled" not in timing.as_dict()  # summary.json's perf keys stay timings only
    timing.compiled = True
    assert timing.compile_s() == pytest.approx(0.02)


def test_epoch_row_has_exactly_the_logged_names():
    timing = Timing()
    steady = timing.observe_train(first_step_s=2.0, steady_s=0.9, steady_steps=9)
    timing.observe_eval(first_batch_s=0.5, steady_batch_s=0.1)
    row = epoch_row(
        epoch=1,
        train={"loss": 1.0, "acc": 0.5},
        val={"loss": 0.8, "acc": 0.6},
        lr=torch.tensor(0.1),
        timing=timing,
        steady_step_s=steady,
        epoch_s=2.9,
        batch_size=32,
    )
    assert set(row) == {"epoch", *EPOCH_METRICS}
    assert row["perf/compile_s"] == pytest.approx((2.0 - 0.1) + (0.5 - 0.1))
    assert row["perf/step_ms"] == pytest.approx(100.0)
    assert row["perf/samples_per_s"] == pytest.approx(320.0)
    assert isinstance(row["train/lr"], float)
