"""Ctrl-C on a local sweep (the sweeper and its agents, as a terminal sends it), then
hydra.sweeper.sweep_id=ID hydra.sweeper.rerun_crashed=true: the interrupt says how to resume,
exits 128 + SIGINT, and the rerun continues the interrupted trial from its own last.pt (same
run id, run dir and W&B run) with its history kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow  # every test here starts processes or compiles

# One trial of two epochs of ~180 steps: the Ctrl-C lands in its second epoch.
SWEEP = [
    "-m",
    "hydra/sweeper=wandb",
    "hydra.sweeper.method=grid",
    "hydra.sweeper.metric={name: val/acc, goal: maximize}",
    "optimizer.lr=choice(0.05)",
    "compile=off",
    "data.batch_size=8",
    "trainer.max_epochs=2",
]


def _wait_for_first_epoch(outputs, proc, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        done = [p for p in outputs.rglob("runs/*/metrics.jsonl") if p.read_text().strip()]
        if done:
            return done[0].parent
        time.sleep(0.2)
    raise AssertionError("the trial never finished its first epoch")


def test_ctrl_c_then_rerun_crashed_resumes_the_trial_in_place(tmp_path):
    outputs = tmp_path / "outputs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *SWEEP],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    run_dir = _wait_for_first_epoch(outputs, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the sweeper and its agents
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "interrupted" in err and "hydra.sweeper.rerun_crashed=true" in err
    assert "gave up" not in err and "Fix the cause" not in err
    (db,) = outputs.rglob("sweep.db")
    sweep_id = db.parent.name
    assert f"hydra.sweeper.sweep_id={sweep_id}" in err
    (before,) = SweepStore(db).runs()
    assert before.state == "crashed" and before.resumable and len(before.history) == 1
    wandb_id = before.summary["paths"]["wandb_run_id"]
    assert wandb_id == before.id

    rerun = run_cli(
        *SWEEP, f"hydra.sweeper.sweep_id={sweep_id}", "hydra.sweeper.rerun_crashed=true",
        cwd=tmp_path,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    (after,) = SweepStore(db).runs()  # the same run, not a new one beside a superseded one
    assert after.id == before.id and after.run_dir == str(run_dir) and not after.superseded
    assert after.state == "finished" and [h["epoch"] for h in after.history] == [1, 2]
    assert after.summary["epochs_completed"] == 2
    assert after.summary["paths"]["wandb_run_id"] == wandb_id
    log = Path(after.log_path).read_text()
    assert "trainer.resume=auto" in log and "resumed from" in log and "in epoch 2" in log
    segments = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(segments) == 2 and {s.name.rsplit("-", 1)[1] for s in segments} == {wandb_id}
    results = json.loads((db.parent / "results.json").read_text())
    assert [r["id"] for r in results["runs"]] == [before.id]
    assert results["runs"][0]["state"] == "finished"
