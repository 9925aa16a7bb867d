"""Fit epoch by epoch: train, reduce over ranks, evaluate, build the epoch row, step the
schedule, keep best.pt and last.pt, log; a SIGTERM/SIGINT (or SLURM's SIGUSR1/SIGUSR2 warning)
stops after the current step with a checkpoint. `FitPlan` holds what a fit works on; `summarise`
turns it into the `RunSummary`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from trainer.compiling import compile_stats, summary_for_tracker
from trainer.config.schema import CompileConfig, TrainerConfig
from trainer.data.plan import DataBundle
from trainer.errors import TrainerError
from trainer.hardware import distributed
from trainer.outputs.console import ProgressView
from trainer.outputs.layout import RunLayout
from trainer.outputs.summary import RunSummary, run_paths
from trainer.outputs.tracking import Tracker
from trainer.train.checkpoint import TrainState
from trainer.train.metrics import Timing, epoch_row
from trainer.train.step import (
    WARNING_SIGNALS,
    Diverged,
    EpochControl,
    GracefulStop,
    Progress,
    StepRules,
    evaluate,
    sync,
    train_epoch,
)

log = logging.getLogger(__name__)


class Interrupted(TrainerError):
    """Training stopped on SIGTERM/SIGINT after saving; exit code 128 + signal, and the message
    (how to resume) is printed as it is."""

    prefix = ""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message, exit_code=128 + signum)


@dataclass
class FitPlan:
    """One run's training objects and where its results go."""

    state: TrainState
    train_model: nn.Module  # the model as trained: compiled in place, DDP-wrapped under ddp
    data: DataBundle
    ctx: distributed.Dist
    device: torch.device
    dtype: torch.dtype | None  # autocast dtype (None: fp32)
    trainer: TrainerConfig
    compile_config: CompileConfig
    compiled: bool
    auto: dict[str, Any] | None  # compile=auto's report
    layout: RunLayout
    tracker: Tracker
    cpu: dict[str, Any] = field(default_factory=dict)  # threads and cores used (cpu_share)
    speed: dict[str, Any] = field(default_factory=dict)  # what speed.py and optim applied
    # Closes the run's compile cache (given by run(), which opened it) with the compile stats
    # and the W&B run; returns the summary's compile.cache section (None: nothing compiled).
    close_cache: Callable[[dict[str, Any], Any], dict[str, Any] | None] = lambda stats, run: None
    timing: Timing = field(default_factory=Timing)
    member: Any = None  # a PBT member (trainer.train.pbt.Member): decides after each interval
    started: float = field(default_factory=time.perf_counter)
    loop_started_at: float = field(default_factory=time.time)  # wall clock, for sweep agents

    def __post_init__(self) -> None:
        self.timing.compiled = self.compiled

    @property
    def progress(self) -> Progress:
        return self.state.progress

    def save(self, name: str) -> None:
        if self.ctx.is_main:
            self.state.save(self.layout.checkpoint(name))


class _StepReport:
    """Progress-bar refresh every `every` steps (reading the loss is a CPU-GPU sync point)."""

    def __init__(self, view: ProgressView, progress: Progress, every: int) -> None:
        self.view, self.progress, self.every = view, progress, every

    def __call__(self, n: int, loss: torch.Tensor) -> None:
        if n % self.every == 0:
            self.view.step(self.progress.batches_done, loss.detach().item())


def train_and_evaluate(fit_plan: FitPlan, stop: Any, view: ProgressView) -> dict[str, float] | None:
    """One epoch of training and a full evaluation; the epoch row, or None when stopped."""
    t, p, st = fit_plan.trainer, fit_plan.progress, fit_plan.state
    fit_plan.data.set_epoch(p.epoch)  # data order depends only on (seed, epoch): resumes replay it
    view.start_epoch(p.epoch, len(fit_plan.data.train), p.batches_done)
    result = train_epoch(
        fit_plan.train_model,
        fit_plan.data.train,
        st.optimizer,
        st.scaler,
        progress=p,
        rules=StepRules(fit_plan.device, fit_plan.dtype, t.grad_clip, t.label_smoothing),
        control=EpochControl(
            max_steps=t.max_steps,
            stop=stop,
            time_first_step=fit_plan.timing.first_step_s is None,
            on_step=_StepReport(view, p, t.log_every_n_steps) if view.enabled else None,
        ),
        ema=st.ema,
    )
    if result is None:
        return None
    means = {"loss": result.loss, "acc": result.acc}
    train, _ = distributed.reduce_mean(fit_plan.ctx, means, result.samples, fit_plan.device)
    steady = fit_plan.timing.observe_train(
        result.first_step_s, result.steady_s, result.steady_steps
    )
    # trainer.ema: the average is evaluated, swapped into the same (compiled) model in place
    with st.ema.swapped() if st.ema is not None else contextlib.nullcontext():
        ev = evaluate(  # the inner module: ranks see different numbers of val batches
            st.model,
            fit_plan.data.val,
            device=fit_plan.device,
            dtype=fit_plan.dtype,
            batch_size=fit_plan.data.eval_batch_size,
        )
    val, _ = distributed.reduce_mean(
        fit_plan.ctx, {"loss": ev.loss, "acc": ev.acc}, ev.samples, fit_plan.device
    )
    fit_plan.timing.observe_eval(ev.first_batch_s, ev.steady_batch_s)
    return epoch_row(
        epoch=p.epoch + 1,
        train=train,
        val=val,
        lr=st.optimizer.param_groups[0]["lr"],
        timing=fit_plan.timing,
        steady_step_s=steady,
        epoch_s=result.steady_s + (result.first_step_s or 0.0),
        batch_size=fit_plan.data.train_batch_size,
    )


def record_epoch(fit_plan: FitPlan, row: dict[str, float], view: ProgressView) -> None:
    """Close the epoch: schedule, progress, best.pt and last.pt, metrics.jsonl, W&B, console."""
    t, p, st = fit_plan.trainer, fit_plan.progress, fit_plan.state
    if st.scheduler is not None:
        st.scheduler.step()
    p.epoch, p.batches_done = p.epoch + 1, 0
    p.history.append(row)
    value, sign = row[t.monitor], 1.0 if t.monitor_mode == "max" else -1.0
    improved = p.best is None or sign * value > sign * p.best
    if improved:
        p.best, p.best_epoch = value, p.epoch
    fit_plan.save("last.pt")
    if improved:
        fit_plan.save("best.pt")
    if fit_plan.ctx.is_main:
        with open(fit_plan.layout.metrics, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    fit_plan.tracker.log(row)
    view.end_epoch(row)
    log.info(
        "epoch %d/%d  train/loss %.4f  train/acc %.4f  val/loss %.4f  val/acc %.4f  %.0f samples/s",
        p.epoch,
        t.max_epochs,
        row["train/loss"],
        row["train/acc"],
        row["val/loss"],
        row["val/acc"],
        row["perf/samples_per_s"],
    )


def fit(fit_plan: FitPlan) -> None:
    """Train until trainer.max_epochs (or max_steps); raise `Interrupted` after a stop."""
    t, p = fit_plan.trainer, fit_plan.progress
    with (
        GracefulStop() as signals,
        ProgressView(t.max_epochs, p.epoch, enabled=fit_plan.ctx.is_main) as view,
    ):
        stop = distributed.AgreedStop(signals, fit_plan.ctx)  # all ranks stop after the same step
        while p.epoch < t.max_epochs and not stop.requested:
            if t.max_steps is not None and p.step >= t.max_steps:
                break
            try:
                row = train_and_evaluate(fit_plan, stop, view)
            except Diverged as err:
                stop_diverged(fit_plan, err)
            if row is None:
                break
            record_epoch(fit_plan, row, view)
            member = fit_plan.member
            if member is not None and member.after_epoch(fit_plan.state, t, row):
                fit_plan.save("last.pt")  # the copied checkpoint and its new values
        if stop.requested:
            stop_after_save(fit_plan, stop.signum)  # type: ignore[arg-type]


def stop_after_save(fit_plan: FitPlan, signum: int) -> None:
    """Save the unfinished epoch (its sums over all ranks), summarise, close W&B, raise."""
    p = fit_plan.progress
    sync(fit_plan.device)
    names = ("loss", "correct", "count")
    sums = distributed.reduce_sums(
        fit_plan.ctx, [p.partial.get(k, 0.0) for k in names], fit_plan.device
    )
    p.partial = dict(zip(names, sums, strict=True)) if sums[2] else {}
    fit_plan.save("last.pt")
    summary = summarise(fit_plan, "interrupted")
    fit_plan.tracker.summary({"status": "interrupted"})
    if signum in WARNING_SIGNALS:  # a cluster's time limit or preemption: W&B requeues the run
        fit_plan.tracker.mark_preempting()
    fit_plan.tracker.finish(exit_code=128 + signum)
    raise Interrupted(
        signum,
        f"{signal.Signals(signum).name} received: stopped in epoch {p.epoch + 1} "
        f"({p.epoch} of {fit_plan.trainer.max_epochs} done), step {p.step}; "
        f"saved {summary.paths['checkpoint']}. Resume with the same command plus "
        f"hydra.run.dir={fit_plan.layout.root} trainer.resume=auto",
    )


def stop_diverged(fit_plan: FitPlan, err: Diverged) -> None:
    """A non-finite training loss: summary.json says `diverged` (and where), last.pt stays the
    last finite epoch's, the W&B run ends with the error's exit code; raise the paragraph."""
    summary = summarise(
        fit_plan, "diverged", diverged={"epoch": err.epoch, "step": err.step, "loss": str(err.loss)}
    )
    fit_plan.tracker.summary({"status": "diverged"})
    fit_plan.tracker.finish(exit_code=err.exit_code)
    kept = summary.paths["checkpoint"]
    lr = fit_plan.state.optimizer.param_groups[0]["lr"]
    raise Diverged(
        err.loss,
        epoch=err.epoch,
        step=err.step,
        message=f"the training loss became {err.loss} in epoch {err.epoch} (step {err.step}); "
        f"the run stopped there. Lower optimizer.lr (now {lr:g}) or set trainer.grad_clip "
        f"(e.g. trainer.grad_clip=1.0). "
        + (f"Kept {kept} (epoch {err.epoch - 1}); " if kept else "No epoch finished; ")
        + f"{summary.paths['summary']} says status: diverged.",
    ) from None


def finish(fit_plan: FitPlan) -> RunSummary:
    """A finished run: its summary (the compile cache's additions included), also as the W&B
    run's summary; the W&B run closed."""
    summary = summarise(fit_plan, "finished")
    fit_plan.tracker.summary(summary.tracker_values(summary_for_tracker(summary.compile)))
    fit_plan.tracker.finish()
    return summary


def summarise(fit_plan: FitPlan, status: str, diverged: dict[str, Any] | None = None) -> RunSummary:
    """The run's summary, after closing the compile cache (what this run compiled
    goes to the bundle first, so the summary can say so); rank 0 writes summary.json."""
    t, p = fit_plan.trainer, fit_plan.progress
    last = p.history[-1] if p.history else {}
    stats = compile_stats()
    cache = fit_plan.close_cache(stats, fit_plan.tracker.wandb_run)
    summary = RunSummary(
        status=status,
        epochs_completed=p.epoch,
        steps=p.step,
        metrics=last,
        best={"name": t.monitor, "value": p.best, "epoch": p.best_epoch, "mode": t.monitor_mode},
        perf={
            "compile_s": last.get("perf/compile_s", 0.0) if fit_plan.compiled else None,
            "samples_per_s": last.get("perf/samples_per_s", 0.0),
            "step_ms": last.get("perf/step_ms", 0.0),
            **fit_plan.timing.as_dict(),
            "loop_started_at": fit_plan.loop_started_at,
            "wall_s": time.perf_counter() - fit_plan.started,
        },
        compile={
            **asdict(fit_plan.compile_config),
            "enabled": fit_plan.compiled,
            **stats,
            "auto": fit_plan.auto,
            "cache": cache,
        },
        device=str(fit_plan.device),
        strategy=t.strategy,
        world_size=fit_plan.ctx.world_size,
        precision=t.precision,
        cpu=fit_plan.cpu,
        torch=torch.__version__,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        diverged=diverged,
        speed=fit_plan.speed,
        data=fit_plan.data.info,
        val_weights="model" if fit_plan.state.ema is None else "ema",
        paths=run_paths(
            fit_plan.layout,
            wandb_run_dir=fit_plan.tracker.run_dir,
            wandb_run_id=fit_plan.tracker.run_id,
        ),
        config=fit_plan.state.config,
    )
    if fit_plan.ctx.is_main:
        summary.write(fit_plan.layout.summary)
    return summary
