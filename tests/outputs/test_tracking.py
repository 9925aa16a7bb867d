"""W&B's x-axis: every metric a run logs per epoch is declared to step by `epoch`."""

from __future__ import annotations

from fnmatch import fnmatch

from trainer.config.schema import EPOCH_METRICS
from trainer.outputs.tracking import declare_epoch_axis


class _Run:
    def __init__(self) -> None:
        self.declared: dict[str, str | None] = {}

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.declared[name] = step_metric


def test_every_epoch_metric_steps_by_epoch():
    run = _Run()
    declare_epoch_axis(run)
    assert run.declared["epoch"] is None
    for name in EPOCH_METRICS:
        (glob,) = [g for g in run.declared if g != "epoch" and fnmatch(name, g)]
        assert run.declared[glob] == "epoch", name
