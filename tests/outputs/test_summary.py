"""RunSummary: round trip, its keys, a torn file."""

from __future__ import annotations

import json
import logging
from dataclasses import fields

import pytest
import torch

from trainer.outputs.layout import RunLayout
from trainer.outputs.summary import RunSummary, run_paths

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def _summary(tmp_path) -> RunSummary:
    RunLayout(tmp_path).last.parent.mkdir(parents=True, exist_ok=True)
    RunLayout(tmp_path).last.write_bytes(b"")  # the summary names only written checkpoints
    return RunSummary(
        status="finished", epochs_completed=1, steps=3, metrics={"val/acc": 0.5},
        best={"name": "val/acc", "value": 0.5, "epoch": 1, "mode": "max"},
        perf={"compile_s": 0.0}, compile={"enabled": False}, device="cpu", strategy="single",
        world_size=1, precision="32", cpu={"threads": 1}, torch=torch.__version__,
        paths=run_paths(RunLayout(tmp_path), wandb_run_dir=None, wandb_run_id=None),
    )  # fmt: skip


def test_summary_round_trips_and_keeps_its_keys(tmp_path):
    summary = _summary(tmp_path)
    summary.write(RunLayout(tmp_path).summary)
    doc = RunSummary.read(RunLayout(tmp_path).summary)
    assert list(doc) == [f.name for f in fields(RunSummary)]
    assert doc["paths"]["checkpoint"] == str(tmp_path / "checkpoints" / "last.pt")
    assert summary.tracker_values({"compile/graphs": 0}) == {
        "best/val/acc": 0.5,
        "perf/compile_s": 0.0,
        "compile/graphs": 0,
    }


@pytest.mark.parametrize("content", [None, '{"status": "finis', "[1, 2]"])
def test_missing_or_torn_summary_reads_as_none(tmp_path, caplog, content):
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="trainer.outputs.summary"):
        assert RunSummary.read(path) is None
    assert str(path) in caplog.text
    path.write_text(json.dumps({"status": "finished"}))
    assert RunSummary.read(path) == {"status": "finished"}
