"""Steering a live two-agent local sweep from a second terminal: paused mid-trial, no new run
starts until `resume`; `stop SWEEP RUN` ends that run `stopped` (its last.pt kept) while the
sweep goes on. Tiny trials (small_cnn on digits, compile off, no logger)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.sweep_commands import TRIAL
from trainer.outputs.layout import RunLayout
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow
# grid, in order: a long run (stopped by hand), a one-epoch run (ends while paused), a last one
CONFIG = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"trainer.max_epochs": {"values": [300, 1, 2]}},
    "command": TRIAL,
}
POLLS = 2 * steering.POLL_S + 1.0  # two agent polls and a margin


def _until(what, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what.__doc__}")


def test_pause_holds_new_runs_until_resume_and_stop_ends_one_run(tmp_path):
    done: dict = {}
    sweep = threading.Thread(
        target=lambda: done.update(res=run_sweep(CONFIG, SweepOptions(agents=2), root=tmp_path))
    )
    sweep.start()
    db = _until(lambda: next(iter((tmp_path / "sweeps").glob("*/sweep.db")), None))
    store, sweep_id = SweepStore(db), Path(db).parent.name

    def two_running():
        """both agents run a trial"""
        runs = store.runs()
        return len(runs) == 2 and all(r.state == "running" for r in runs) and runs

    long_run, short_run = _until(two_running)
    assert sweep_cli(["--root", str(tmp_path), "pause", sweep_id]) == 0

    def short_ended():
        """the one-epoch run ends while the sweep is paused"""
        return store.run(short_run.id).state == "finished"

    _until(short_ended)
    time.sleep(POLLS)  # its agent looked again: no new run
    assert [r.id for r in store.runs()] == [long_run.id, short_run.id]
    assert store.run(long_run.id).state == "running"  # a running run goes on while paused

    asked_at = time.time()
    assert sweep_cli(["--root", str(tmp_path), "stop", sweep_id, long_run.id]) == 0

    def long_stopped():
        """the run stopped by hand ends stopped"""
        return store.run(long_run.id).state == "stopped"

    _until(long_stopped, 30.0)
    run = store.run(long_run.id)
    assert RunLayout(Path(run.run_dir)).last.is_file() and run.exit_code in (0, 143)
    took = run.ended_at - asked_at  # the agent's poll, SIGTERM, the trial's save and exit
    print(f"stop {long_run.id}: ended {took:.1f} s after the command")
    assert took < steering.POLL_S + 15.0
    time.sleep(POLLS)
    assert len(store.runs()) == 2 and store.lifecycle()[0] == "paused"

    assert sweep_cli(["--root", str(tmp_path), "resume", sweep_id]) == 0
    sweep.join(60.0)
    assert not sweep.is_alive()
    states = {r["id"]: r["state"] for r in done["res"]["runs"]}
    assert states[long_run.id] == "stopped" and states[short_run.id] == "finished"
    assert sorted(states.values()) == ["finished", "finished", "stopped"]  # the third ran
    assert done["res"]["state_changed"]["verb"] == "resume"
    store.close()
