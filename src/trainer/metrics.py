"""Names of the metrics a run logs; the single list that sweeps validate `metric.name` against."""

from __future__ import annotations

# Logged once per epoch (an epoch is one W&B "iteration" for hyperband).
EPOCH_METRICS: tuple[str, ...] = (
    "train/loss",
    "train/acc",
    "val/loss",
    "val/acc",
    "perf/compile_s",
    "perf/samples_per_s",
    "perf/step_ms",
    "perf/epoch_s",
    "train/lr",
)
