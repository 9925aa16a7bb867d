"""trainer.resume: a SIGINT then trainer.resume=auto continues the same W&B run with one epoch
numbering; resuming a finished run says so and how to train further."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, run_cli
from tests.test_cli import _wait_for
from trainer.config.schema import ConfigError
from trainer.run import run

# ~360 steps per epoch; on the CPU, also on a GPU host (bit-exact resume)
ARGS = ["compile=off", "data.batch_size=4", "trainer.max_epochs=2", "trainer.device=cpu"]


@pytest.mark.slow
def test_sigint_then_resume_auto_continues_the_same_wandb_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *ARGS, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    _wait_for(proc, "epoch 1/2", timeout=120)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err[-2000:]
    stopped = re.search(r"stopped in epoch (\d+) \((\d+) of 2 done\)", err)
    assert stopped, err[-2000:]
    first = json.loads((run_dir / "summary.json").read_text())["paths"]["wandb_run_id"]
    assert first

    resumed = run_cli(*ARGS, f"hydra.run.dir={run_dir}", "trainer.resume=auto", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = resumed.stdout + resumed.stderr + "".join(p.read_text() for p in run_dir.glob("*.log"))
    assert f"in epoch {stopped.group(1)}, step" in log  # the same number the stop gave
    final = json.loads((run_dir / "summary.json").read_text())
    assert final["status"] == "finished" and final["paths"]["wandb_run_id"] == first
    segments = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(segments) == 2  # one W&B run (one id), recorded in two sessions
    assert {s.name.rsplit("-", 1)[1] for s in segments} == {first}
    assert {p.stem.removeprefix("run-") for s in segments for p in s.glob("run-*.wandb")} == {first}


def _finished(cfg_factory, tmp_path) -> Path:
    run_dir = tmp_path / "done"
    run(cfg_factory(*FAST, "trainer.max_epochs=1"), run_dir=run_dir)
    return run_dir


@pytest.mark.slow
def test_resuming_a_finished_run_says_how_to_train_further(cfg_factory, tmp_path):
    last = _finished(cfg_factory, tmp_path) / "checkpoints" / "last.pt"
    new_dir = tmp_path / "again"
    with pytest.raises(ConfigError) as err:
        run(cfg_factory(*FAST, "trainer.max_epochs=1", f"trainer.resume={last}"), run_dir=new_dir)
    message = str(err.value)
    assert "already at epoch 1 of trainer.max_epochs=1" in message
    assert "trainer.max_epochs=11" in message and err.value.exit_code == 2
    assert not (new_dir / "summary.json").exists()  # no summary naming unwritten checkpoints
    assert not (new_dir / "checkpoints").exists()

    further = run(
        cfg_factory(*FAST, "trainer.max_epochs=2", f"trainer.resume={last}"), run_dir=new_dir
    )
    summary = json.loads((new_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 2 and "val/acc" in further
    assert Path(summary["paths"]["checkpoint"]).is_file()


@pytest.mark.slow
def test_resume_auto_of_a_finished_run_trains_nothing_and_exits_0(cfg_factory, tmp_path, capsys):
    run_dir = _finished(cfg_factory, tmp_path)
    before = (run_dir / "summary.json").read_text()
    row = (run_dir / "metrics.jsonl").read_text()
    (run_dir / "metrics.jsonl").write_text("")  # killed after saving last.pt, before its row
    result = run(cfg_factory(*FAST, "trainer.max_epochs=1", "trainer.resume=auto"), run_dir=run_dir)
    assert "this run is already at epoch 1 of trainer.max_epochs=1" in capsys.readouterr().out
    assert "val/acc" in result and (run_dir / "summary.json").read_text() == before
    assert (run_dir / "metrics.jsonl").read_text() == row  # the checkpoint's history gives it


def test_metrics_jsonl_is_aligned_with_the_checkpoint_history(tmp_path):
    from trainer.train.resume import align_metrics

    path, rows = tmp_path / "metrics.jsonl", [{"epoch": e, "val/acc": e / 10} for e in (1, 2, 3)]
    lines = [json.dumps(r) + "\n" for r in rows]
    path.write_text("".join(lines[:2]))
    inode = path.stat().st_ino
    align_metrics(path, rows)  # a row lost to a kill: appended, the file is the same file
    assert path.read_text() == "".join(lines) and path.stat().st_ino == inode
    align_metrics(path, rows[:1])  # resumed from an earlier checkpoint: later rows dropped
    assert path.read_text() == lines[0]
    path.write_text(lines[0] + lines[1][:7])  # a torn last line
    align_metrics(path, rows[:2])
    assert path.read_text() == "".join(lines[:2])
    fresh = tmp_path / "new" / "metrics.jsonl"  # resumed into a new run directory
    align_metrics(fresh, rows)
    assert fresh.read_text() == "".join(lines)


def test_summary_paths_name_only_written_checkpoints(tmp_path):
    from trainer.outputs.layout import RunLayout
    from trainer.outputs.summary import run_paths

    layout = RunLayout(tmp_path)
    paths = run_paths(layout, wandb_run_dir=None, wandb_run_id=None)
    assert paths["checkpoint"] is None and paths["best_checkpoint"] is None
    layout.last.parent.mkdir(parents=True)
    layout.last.write_bytes(b"x")
    assert run_paths(layout, wandb_run_dir=None, wandb_run_id=None)["checkpoint"] == str(
        layout.last
    )
