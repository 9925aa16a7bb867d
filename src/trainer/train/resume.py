"""`trainer.resume`: which checkpoint a run resumes from, restored into its `TrainState`, and
what the resumed run still has to do (nothing, when it already trained its whole budget)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config.schema import ConfigError, TrainerConfig
from trainer.outputs.layout import RunLayout
from trainer.outputs.summary import RunSummary
from trainer.train.checkpoint import TrainState
from trainer.train.step import Progress

log = logging.getLogger(__name__)


def resume_path(resume: str | None, layout: RunLayout) -> Path | None:
    """The checkpoint trainer.resume names: auto is this run directory's last.pt, if any."""
    if resume is None:
        return None
    if resume == "auto":
        if layout.last.is_file():
            return layout.last
        log.info("trainer.resume=auto: no %s yet, starting from scratch", layout.last)
        return None
    return Path(resume).expanduser()


@dataclass
class Resumed:
    """What trainer.resume restored: the checkpoint, whether its run already trained its whole
    budget (`done`), and the interrupted run's W&B run id to continue."""

    path: Path
    auto: bool
    trainer: TrainerConfig
    done: bool
    wandb_id: str | None

    def already_done(self, progress: Progress) -> dict[str, Any]:
        """A finished run resumed: nothing to train. trainer.resume=auto (the same command run
        again) returns its last metrics; a checkpoint named explicitly is a ConfigError that
        says how to train further."""
        t = self.trainer
        if t.max_steps is not None and progress.step >= t.max_steps:
            where = f"step {progress.step} of trainer.max_steps={t.max_steps}"
            more = f"trainer.max_steps={progress.step + 100}"
        else:
            where = f"epoch {progress.epoch} of trainer.max_epochs={t.max_epochs}"
            more = f"trainer.max_epochs={progress.epoch + 10}"
        how = (
            f"nothing is left to train. To train further, resume with a larger budget, e.g. "
            f"trainer.resume={self.path} {more}; to measure it, python -m trainer.evaluate "
            f"checkpoint={self.path}"
        )
        if not self.auto:
            raise ConfigError(f"trainer.resume={self.path}: that run is already at {where}; {how}.")
        print(f"trainer.resume=auto: this run is already at {where}; {how}.", flush=True)
        last = progress.history[-1] if progress.history else {}
        return {**last, "best": progress.best}


def restore(
    state: TrainState, t: TrainerConfig, layout: RunLayout, *, is_main: bool
) -> Resumed | None:
    """Load the checkpoint trainer.resume names into `state`; None when there is none."""
    path = resume_path(t.resume, layout)
    if path is None:
        return None
    state.restore(path, is_main=is_main)
    p = state.progress
    done = p.epoch >= t.max_epochs or (t.max_steps is not None and p.step >= t.max_steps)
    if is_main and (t.resume == "auto" or not done):  # a refused resume writes nothing
        align_metrics(layout.metrics, p.history)
    return Resumed(path, t.resume == "auto", t, done, _wandb_id(path))


def align_metrics(path: Path, history: list[dict[str, float]]) -> None:
    """metrics.jsonl says what the resumed checkpoint's history says. A kill between saving
    last.pt and appending the epoch's row left that row out: it is appended (the lines already
    there stay as they are, for an agent reading the file as it grows). A resume from an earlier
    checkpoint (best.pt) drops the rows of the epochs it trains again."""
    rows = [json.dumps(row) for row in history]
    text = path.read_text() if path.is_file() else ""
    lines = text.splitlines() if text.endswith("\n") or not text else None  # None: a torn line
    if lines == rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines is not None and lines == rows[: len(lines)]:
        with open(path, "a") as handle:
            handle.write("".join(row + "\n" for row in rows[len(lines) :]))
        return
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(row + "\n" for row in rows))
    os.replace(partial, path)


def _wandb_id(checkpoint: Path) -> str | None:
    """The W&B run id of the run that wrote `checkpoint` (its summary.json, beside checkpoints/)."""
    summary = checkpoint.parent.parent / "summary.json"
    doc = RunSummary.read(summary) if summary.is_file() else None
    return ((doc or {}).get("paths") or {}).get("wandb_run_id")
