"""The training and evaluation loops: one epoch of optimizer steps (resumable mid-epoch) and a
full pass over the validation set with a fixed batch shape (no sample dropped, no recompile)."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import TrainerError
from trainer.hardware.devices import sync

IGNORE = -100  # target of padding samples; cross_entropy and accuracy skip it


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so a resume continues exactly."""

    epoch: int = 0  # completed epochs
    step: int = 0  # optimizer steps taken
    batches_done: int = 0  # batches of the current, unfinished epoch
    partial: dict[str, float] = field(default_factory=dict)  # running sums of that epoch
    best: float | None = None  # best value of trainer.monitor so far
    best_epoch: int | None = None
    history: list[dict[str, float]] = field(default_factory=list)  # per-epoch metrics


@dataclass
class EpochResult:
    loss: float
    acc: float
    samples: int
    steps: int  # optimizer steps taken in this call
    first_step_s: float | None  # the step that paid for compilation, if this call took it
    steady_s: float  # seconds spent in the remaining steps
    steady_steps: int


# Stop after the current step, save, exit 128 + signal: SIGTERM, Ctrl-C, and the warning signals
# a cluster sends before a time limit or preemption (SLURM's --signal, SIGUSR1 or SIGUSR2).
WARNING_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, *WARNING_SIGNALS)


class GracefulStop:
    """Turns SIGTERM/SIGINT (and SLURM's warning signals, SIGUSR1/SIGUSR2) into a request to
    stop after the current step.

    A second SIGINT restores Python's default (KeyboardInterrupt) so Ctrl-C twice still quits.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if self.signum is None:  # the first signal says why it stops (a later SIGTERM does not)
            self.signum = signum

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _batches(loader: Any, skip: int) -> Iterator[tuple[int, Any]]:
    """Enumerate the loader, skipping the `skip` batches a resumed epoch already trained on
    (the trainer's batches skip them without producing or augmenting them)."""
    if hasattr(loader, "iterate"):
        yield from enumerate(loader.iterate(skip), start=skip)
        return
    for index, batch in enumerate(loader):
        if index >= skip:
            yield index, batch


@dataclass(frozen=True)
class StepRules:
    """How a training step runs: autocast on `device` with `dtype` (None: fp32), gradient
    clipping (trainer.grad_clip) and label smoothing (trainer.label_smoothing)."""

    device: torch.device
    dtype: torch.dtype | None = None
    grad_clip: float | None = None
    label_smoothing: float = 0.0


@dataclass(frozen=True)
class EpochControl:
    """When an epoch stops before its end and what it reports on the way: the step budget
    (trainer.max_steps), the stop flag a signal sets, whether to time the first step apart (it
    compiles), and a callback after each step with the step count and its loss."""

    max_steps: int | None
    stop: GracefulStop
    time_first_step: bool
    on_step: Callable[[int, torch.Tensor], None] | None = None


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    x: torch.Tensor,
    y: torch.Tensor,
    rules: StepRules,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step as training runs it: forward under autocast, cross-entropy in fp32
    (label-smoothed when asked), scaled backward, optional gradient clipping, step; returns
    (loss, logits) as device tensors, never read here (no host-device sync). compile=auto times
    this very function, so it measures the graph training runs."""
    with autocast(rules.device, rules.dtype):
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=rules.label_smoothing)
    scaler.scale(loss).backward()
    if rules.grad_clip is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), rules.grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss, logits


class _RunningSums:
    """Loss and correct-prediction sums kept on the device (no sync per step), on top of the
    sums a resumed epoch carried over in `progress.partial`."""

    def __init__(self, carried: dict[str, float], device: torch.device) -> None:
        self.carried = carried or {"loss": 0.0, "correct": 0.0, "count": 0.0}
        self.loss = torch.zeros((), device=device, dtype=torch.float64)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.count = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        batch = y.shape[0]
        self.loss += loss.detach().double() * batch
        self.correct += (logits.detach().argmax(dim=1) == y).sum()
        self.count += batch

    def fold(self) -> dict[str, float]:
        """The epoch's sums so far as floats (a CPU-GPU sync point)."""
        return {
            "loss": self.carried["loss"] + float(self.loss),
            "correct": self.carried["correct"] + float(self.correct),
            "count": self.carried["count"] + self.count,
        }


class Diverged(TrainerError, FloatingPointError):
    """The training loss stopped being finite: an outcome of the run's hyperparameters, not a
    crash. Exit code 3 (sweep agents record the run as failed, its summary says diverged)."""

    exit_code = 3
    prefix = "diverged: "

    def __init__(self, loss: float, *, epoch: int, step: int, message: str = "") -> None:
        self.loss, self.epoch, self.step = loss, epoch, step
        super().__init__(
            message
            or f"the training loss is {loss} in epoch {epoch} (step {step}); lower optimizer.lr "
            "or set trainer.grad_clip."
        )


def _epoch_result(totals: dict[str, float], progress: Progress, **timing: Any) -> EpochResult:
    n = max(totals["count"], 1.0)
    if not math.isfinite(totals["loss"]):
        raise Diverged(totals["loss"] / n, epoch=progress.epoch + 1, step=progress.step)
    return EpochResult(
        loss=totals["loss"] / n, acc=totals["correct"] / n, samples=int(totals["count"]), **timing
    )


def train_epoch(
    model: nn.Module,
    loader: Any,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    *,
    progress: Progress,
    rules: StepRules,
    control: EpochControl,
    ema: Any = None,
) -> EpochResult | None:
    """Train until the epoch ends (returns its result) or a stop is requested (returns None;
    the running sums are left in `progress.partial` for the checkpoint). Loss and accuracy are
    summed on the device and read once; `ema` (a WeightAverage) is updated after each step."""
    device, max_steps, stop = rules.device, control.max_steps, control.stop
    model.train()
    sums = _RunningSums(progress.partial, device)
    steps, first_step_s = 0, None
    steady_start = start = time.perf_counter()
    for index, (x, y) in _batches(loader, progress.batches_done):
        if max_steps is not None and progress.step >= max_steps:
            break
        timed = control.time_first_step and steps == 0
        if timed:
            sync(device)
            start = time.perf_counter()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss, logits = train_step(model, optimizer, scaler, x, y, rules)
        sums.add(loss, logits, y)
        if ema is not None:
            ema.update(progress.step + 1)
        steps, progress.step, progress.batches_done = steps + 1, progress.step + 1, index + 1
        if timed:
            sync(device)
            first_step_s = time.perf_counter() - start
            steady_start = time.perf_counter()
        if control.on_step is not None:
            control.on_step(steps, loss)
        if stop.requested:
            progress.partial = sums.fold()
            return None
    sync(device)
    steady_s = time.perf_counter() - steady_start
    progress.partial = {}
    return _epoch_result(
        sums.fold(),
        progress,
        steps=steps,
        first_step_s=first_step_s,
        steady_s=steady_s,
        steady_steps=steps - (1 if first_step_s is not None else 0),
    )


def pad_batch(
    x: torch.Tensor, y: torch.Tensor, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pad a smaller batch to `batch_size` (zero inputs, IGNORE targets); returns the padding."""
    pad = batch_size - y.shape[0]
    if pad > 0:
        x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
        y = torch.cat([y, y.new_full((pad,), IGNORE)])
    return x, y, pad


@dataclass
class EvalResult:
    loss: float
    acc: float
    samples: int
    first_batch_s: float
    steady_batch_s: float  # mean seconds per batch after the first


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Any,
    *,
    device: torch.device,
    dtype: torch.dtype | None,
    batch_size: int,
) -> EvalResult:
    """Loss and accuracy over every validation sample.

    The last, smaller batch is padded to `batch_size` with IGNORE targets, so a compiled model
    sees one input shape and never recompiles for it, and no sample is dropped.
    """
    model.eval()
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    count = 0
    times: list[float] = []
    for x, y in loader:
        if not times:
            sync(device)
        start = time.perf_counter()
        x, y, pad = pad_batch(x, y, batch_size)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        with autocast(device, dtype):
            logits = model(x)
        loss_sum += F.cross_entropy(
            logits.float(), y, ignore_index=IGNORE, reduction="sum"
        ).double()
        correct += (logits.argmax(dim=1) == y).sum()
        count += int(y.shape[0]) - max(pad, 0)
        if not times:
            sync(device)
        times.append(time.perf_counter() - start)
    sync(device)
    n = max(count, 1)
    steady = sum(times[1:]) / (len(times) - 1) if len(times) > 1 else (times[0] if times else 0.0)
    return EvalResult(
        loss=float(loss_sum) / n,
        acc=float(correct) / n,
        samples=count,
        first_batch_s=times[0] if times else 0.0,
        steady_batch_s=steady,
    )
