"""Weights & Biases tracking: one run per job, offline by default, config logged flat and dotted,
and agreement with a sweep agent's parameters checked before training."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from trainer.config.schema import EPOCH_METRICS, ConfigError, LoggerConfig
from trainer.trial.trial_params import sweep_param_values

log = logging.getLogger(__name__)


def sweep_params() -> dict[str, Any] | None:
    """The parameters a sweep agent handed this process ({key: value}), or None."""
    path = os.environ.get("WANDB_SWEEP_PARAM_PATH")
    return sweep_param_values(path) if path else None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def check_sweep_agreement(
    params: dict[str, Any], flat: dict[str, Any], choices: dict[str, Any]
) -> None:
    """Raise ConfigError unless every sweep parameter equals the Hydra config's value."""
    problems = []
    for key, value in params.items():
        if key in flat:
            actual = flat[key]
        elif key in choices:
            actual = choices[key]
        else:
            problems.append(f"{key} (not a key of the composed config nor a config group)")
            continue
        if not _same(actual, value):
            problems.append(f"{key}: the sweep says {value!r}, the Hydra config has {actual!r}")
    if problems:
        raise ConfigError(
            "The sweep agent's parameters (WANDB_SWEEP_PARAM_PATH) disagree with the Hydra "
            f"config this run composed: {'; '.join(problems)}. Launch trials with the sweep's "
            "generated command (`python -m trainer key=value ...`) so every parameter reaches "
            "Hydra as an override."
        )


class Tracker:
    """A W&B run, or nothing at all when tracking is off."""

    def __init__(self, run: Any | None) -> None:
        self._run = run

    @property
    def active(self) -> bool:
        return self._run is not None

    @property
    def run_dir(self) -> str | None:
        return None if self._run is None else str(Path(self._run.dir).parent)

    @property
    def wandb_run(self) -> Any:
        """The W&B run object (None when tracking is off): compile-cache artifacts go through it."""
        return self._run

    @property
    def run_id(self) -> str | None:
        return None if self._run is None else self._run.id

    def log(self, metrics: dict[str, Any]) -> None:
        if self._run is not None:
            self._run.log(metrics)

    def summary(self, values: dict[str, Any]) -> None:
        if self._run is not None:
            self._run.summary.update(values)

    def mark_preempting(self) -> None:
        """Tell W&B that a cluster is preempting the run: in a sweep, the server hands a
        preempted run out again, and its trial resumes from its checkpoint."""
        if self._run is not None:
            self._run.mark_preempting()

    def finish(self, exit_code: int = 0) -> None:
        if self._run is not None:
            self._run.finish(exit_code=exit_code)
            self._run = None


def start_tracker(
    cfg: LoggerConfig,
    *,
    run_dir: Path,
    flat_config: dict[str, Any],
    choices: dict[str, Any],
    resume_id: str | None = None,
) -> Tracker:
    """Start this job's W&B run (finishing any run a previous job left open); a resumed run
    (`resume_id`: the interrupted run's W&B run id) continues it, offline too."""
    params = sweep_params()
    if params is not None:
        check_sweep_agreement(params, flat_config, choices)
    mode = os.environ.get("WANDB_MODE") or cfg.mode
    if not cfg.enabled or mode == "disabled":
        return Tracker(None)
    import wandb  # lazy: wandb costs 0.3 s at start-up; a run with logger=none never loads it

    if wandb.run is not None:  # an earlier job of a multirun in this process
        wandb.run.finish()
    wandb_dir = Path(os.environ.get("WANDB_DIR") or run_dir)
    wandb_dir.mkdir(parents=True, exist_ok=True)
    # The sweep's own keys are set by wandb from WANDB_SWEEP_PARAM_PATH; passing them again
    # would only repeat them (they were checked equal above).
    config = {k: v for k, v in flat_config.items() if params is None or k not in params}
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        group=cfg.group or os.environ.get("WANDB_SWEEP_ID"),  # a sweep's trials group by sweep
        tags=list(cfg.tags) or None,
        name=cfg.name,
        dir=str(wandb_dir),
        mode=mode,
        config=config,
        reinit="finish_previous",
        **_resume_args(resume_id),
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
    )
    declare_epoch_axis(run)
    log.info("W&B run %s (%s) in %s", run.id, mode, Path(run.dir).parent)
    return Tracker(run)


def declare_epoch_axis(run: Any) -> None:
    """Plot every epoch metric (`train/*`, `val/*`, `perf/*`) against `epoch` in W&B's charts,
    not against W&B's logging step: a synced offline run and a server sweep line up by epoch."""
    run.define_metric("epoch")
    for prefix in sorted({name.split("/")[0] for name in EPOCH_METRICS}):
        run.define_metric(f"{prefix}/*", step_metric="epoch")


def _resume_args(resume_id: str | None) -> dict[str, Any]:
    """wandb.init's id and resume for a resumed run: the interrupted run's id (a sweep agent's
    WANDB_RUN_ID wins, it names the same trial), resumed when it exists, created when not."""
    if resume_id is None:
        return {}
    return {"id": os.environ.get("WANDB_RUN_ID") or resume_id, "resume": "allow"}
