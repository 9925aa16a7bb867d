"""`RunSummary`: the one contract between a run and what reads it (the console table, the
W&B summary, the sweep agent and report). The only writer of summary.json, and its reader."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.outputs.layout import RunLayout, write_text_atomic

log = logging.getLogger(__name__)


def run_paths(layout: RunLayout, *, wandb_run_dir: str | None, wandb_run_id: str | None):
    """The summary's `paths` section: where this run's files are (a checkpoint not written,
    e.g. best.pt of a run stopped in its first epoch, is None)."""
    return {
        "run_dir": str(layout.root),
        "checkpoint": str(layout.last) if layout.last.is_file() else None,
        "best_checkpoint": str(layout.best) if layout.best.is_file() else None,
        "summary": str(layout.summary),
        "metrics": str(layout.metrics),
        "wandb_run_dir": wandb_run_dir,
        "wandb_run_id": wandb_run_id,
        "compile_trace": str(layout.compile_trace) if layout.compile_trace.is_dir() else None,
        "compile_report": str(layout.compile_report) if layout.compile_report.is_file() else None,
    }


@dataclass
class RunSummary:
    """What a run did; the fields are summary.json's top-level keys, in this order."""

    status: str  # finished | interrupted | diverged
    epochs_completed: int
    steps: int  # optimizer steps taken
    metrics: dict[str, float]  # the last epoch's row (EPOCH_METRICS and "epoch")
    best: dict[str, Any]  # name, value, epoch, mode of trainer.monitor
    perf: dict[str, Any]  # compile_s, samples_per_s, step_ms, first/steady timings, wall_s
    compile: dict[str, Any]  # the compile config, enabled, Dynamo statistics, auto's report
    device: str
    strategy: str
    world_size: int
    precision: str
    cpu: dict[str, Any]  # torch threads, inter-op threads, affinity, DataLoader workers
    torch: str  # torch.__version__
    # The GPUs its launcher gave it (a sweep agent's device slot, SLURM, ...); None: not set.
    cuda_visible_devices: str | None = None
    # status diverged: where the training loss stopped being finite (epoch, step, loss)
    diverged: dict[str, Any] | None = None
    speed: dict[str, Any] = field(
        default_factory=dict
    )  # TF32, cuDNN benchmark, channels_last, optimizer kernel
    data: dict[str, Any] = field(
        default_factory=dict
    )  # pipeline (memory | stream), stored size, augmentation
    val_weights: str = "model"  # what val/* measured: model | ema (trainer.ema)
    paths: dict[str, Any] = field(default_factory=dict)  # see run_paths
    config: dict[str, Any] = field(default_factory=dict)  # the resolved run config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: str | Path) -> None:
        """Write summary.json atomically: an agent reading it never sees half a file."""
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, default=str))

    @property
    def best_value(self) -> float | None:
        return self.best.get("value")

    def tracker_values(self, compile_values: dict[str, Any]) -> dict[str, Any]:
        """W&B summary keys of a finished run: the best metric, compile cost and statistics."""
        return {
            f"best/{self.best['name']}": self.best_value,
            "perf/compile_s": self.perf["compile_s"],
            **compile_values,
        }

    @staticmethod
    def read(path: str | Path) -> dict[str, Any] | None:
        """summary.json as a dict; None (with a warning) when it is missing, torn or not a
        summary, e.g. a trial killed before it finished."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            log.warning("no run summary at %s (the run ended before writing it)", path)
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            log.warning("unreadable run summary %s (%s); ignoring it", path, err)
            return None
        if not isinstance(doc, dict) or "status" not in doc:
            log.warning("%s is not a run summary (no status); ignoring it", path)
            return None
        return doc
