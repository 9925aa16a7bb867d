"""The per-epoch row of the metrics a run logs (their names are `EPOCH_METRICS`, in the config
schema, which `trainer.monitor` and a sweep's `metric.name` are checked against); no torch
import here."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Timing:
    """First (compiling) and steady step and eval-batch times, in seconds, as first measured."""

    first_step_s: float | None = None
    steady_step_s: float | None = None
    eval_first_s: float | None = None
    eval_steady_s: float | None = None
    compiled: bool = True  # eager runs (compile=off) add no compile time, whatever the noise

    def observe_train(self, first_step_s: float | None, steady_s: float, steady_steps: int):
        """Record an epoch's timings; returns this epoch's steady seconds per step (or None)."""
        if first_step_s is not None:
            self.first_step_s = first_step_s
        steady = steady_s / steady_steps if steady_steps else None
        if steady is not None and self.steady_step_s is None:
            self.steady_step_s = steady
        return steady

    def observe_eval(self, first_batch_s: float, steady_batch_s: float) -> None:
        if self.eval_first_s is None:
            self.eval_first_s, self.eval_steady_s = first_batch_s, steady_batch_s

    def compile_s(self) -> float:
        """Seconds compilation added: first minus steady step, plus the same for evaluation."""
        if not self.compiled or self.first_step_s is None or self.steady_step_s is None:
            return 0.0
        spent = max(self.first_step_s - self.steady_step_s, 0.0)
        return spent + max((self.eval_first_s or 0.0) - (self.eval_steady_s or 0.0), 0.0)

    def as_dict(self) -> dict[str, float | None]:
        timings = asdict(self)
        del timings["compiled"]
        return timings


def epoch_row(
    *,
    epoch: int,
    train: dict[str, float],
    val: dict[str, float],
    lr: float,
    timing: Timing,
    steady_step_s: float | None,
    epoch_s: float,
    batch_size: int,
) -> dict[str, float]:
    """The metrics of one finished epoch (`epoch` counts from 1), keyed as EPOCH_METRICS."""
    step_s = steady_step_s if steady_step_s is not None else (timing.steady_step_s or 0.0)
    return {
        "epoch": epoch,
        "train/loss": train["loss"],
        "train/acc": train["acc"],
        "val/loss": val["loss"],
        "val/acc": val["acc"],
        "train/lr": float(lr),
        "perf/compile_s": timing.compile_s(),
        "perf/step_ms": step_s * 1000.0,
        "perf/samples_per_s": batch_size / step_s if step_s else 0.0,
        "perf/epoch_s": epoch_s,
    }
