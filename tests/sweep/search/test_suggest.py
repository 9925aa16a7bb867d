"""Optuna (and Ax) through W&B's scheduler optimizers, offline, with real agent and trial
processes: two agents share one study (a two-objective search, its Pareto front checked), a
median pruner prunes a clearly bad run, and kill -9 then resume continues the same study."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.sweep_commands import TRIAL
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.report import leaderboard, pareto
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.suggestions import SuggestionQueue

pytestmark = pytest.mark.slow  # every test here starts processes or compiles

QUICK = [*TRIAL, "trainer.max_epochs=1", "trainer.max_steps=2"]
LR = {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.5}


def test_two_agents_share_a_two_objective_study_and_write_its_pareto_front(tmp_path, capsys):
    objectives = [
        {"name": "val/acc", "goal": "maximize"},
        {"name": "perf/step_ms", "goal": "minimize"},
    ]
    config = {
        "method": "custom",
        "metrics": objectives,
        "run_cap": 6,
        "scheduler": {"engine": "optuna"},
        "parameters": {"optimizer.lr": LR, "data.batch_size": {"values": [16, 64, 256]}},
        "command": QUICK,
    }  # fmt: skip
    res = run_sweep(config, SweepOptions(agents=2), root=tmp_path)
    runs = res["runs"]
    assert len(runs) == 6 and all(r["state"] == "finished" for r in runs)
    assert len({json.dumps(r["params"], sort_keys=True) for r in runs}) == 6
    # Which agents ran them is timing: with 2-step trials one agent may run all six before the
    # other's template is ready. Both agents claimed from the one study, each suggestion once.
    store = SweepStore(tmp_path / "sweeps" / res["sweep_id"] / "sweep.db")
    assert all(r.agent_pid for r in store.runs()) and len(store.runs()) == 6
    values = {r["id"]: list(r["objectives"].values()) for r in runs}
    front = [r["id"] for r in res["pareto_front"]]
    assert front and all(r["pareto"] == (r["id"] in front) for r in runs)
    for run_id in front:  # no run dominates a run of the front
        assert not any(pareto.dominates(values[o], values[run_id], objectives) for o in values)
    for other in set(values) - set(front):  # and every other run is dominated
        assert any(pareto.dominates(values[f], values[other], objectives) for f in front)
    directory = tmp_path / "sweeps" / res["sweep_id"]
    assert json.loads((directory / "results.json").read_text())["pareto_front"]
    best = (directory / "best.yaml").read_text()
    assert all(f"# {run_id}: python -m trainer " in best for run_id in front)
    assert "pareto" in capsys.readouterr().out
    fig = leaderboard.figure(store, res)  # the front, then the parameters, then the runs
    assert fig.axes[0].get_xlabel() == "val/acc" and fig.axes[0].get_ylabel() == "perf/step_ms"


STUDIES = """
import optuna

def median(sweep):
    study = optuna.create_study(
        direction="maximize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
    )
    # two good runs, then a hopeless one, long enough that only a pruner ends it early; the
    # median pruner compares a run's last epoch with the others' same epoch, so the good runs
    # are long enough (15 epochs, about 3 s) for the optimizer to see the bad one within them
    for lr, epochs in ((0.05, 15), (0.05, 15), (1e-9, 60)):
        study.enqueue_trial({"optimizer.lr": lr, "trainer.max_epochs": epochs})
    return study
"""


def test_a_median_pruner_prunes_a_clearly_bad_run_which_keeps_its_checkpoint(tmp_path):
    (tmp_path / "studies.py").write_text(textwrap.dedent(STUDIES))
    config = {
        "method": "custom",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "run_cap": 3,
        "scheduler": {"engine": "optuna", "source": str(tmp_path / "studies.py"), "optimizer": "median"},
        "parameters": {
            "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-10, "max": 0.5},
            "trainer.max_epochs": {"values": [15, 60]},
        },
        "command": [*TRIAL, "data.batch_size=128"],
    }  # fmt: skip
    res = run_sweep(config, SweepOptions(agents=1), root=tmp_path)
    by_lr = {r["params"]["optimizer.lr"]: r for r in res["runs"]}
    bad = by_lr[1e-9]
    assert bad["state"] == "pruned" and bad["exit_code"] == 143
    assert 1 <= bad["epochs"] < 60
    assert (
        tmp_path / "sweeps" / res["sweep_id"] / "runs" / bad["id"] / "checkpoints" / "last.pt"
    ).is_file()
    assert res["best"]["params"]["optimizer.lr"] == 0.05
    log = (tmp_path / "sweeps" / res["sweep_id"] / "logs" / "optimizer.log").read_text()
    assert f"optuna prunes run {bad['id']}" in log


SWEEPER = """
import sys
from trainer.sweep.local import run_sweep
from trainer.sweep.store.suggestions import SuggestionQueue
from trainer.sweep.options import SweepOptions
run_sweep(%r, SweepOptions(agents=2), root=sys.argv[1])
"""


def test_kill_9_then_resume_continues_the_same_study(tmp_path):
    config = {
        "method": "custom",
        "metric": {"name": "val/acc", "goal": "maximize"},
        # 8: at the kill, 2 finished + 2 running + up to 2 queued leave the rebuilt optimizer
        # at least 2 runs to suggest, however far the queue had got
        "run_cap": 8,
        "scheduler": {"engine": "optuna"},
        "parameters": {"optimizer.lr": LR},
        # trials of about a second: the moment with two finished and two running lasts long
        # enough to be seen (3-step trials ended in 0.3 s and the sweep could end unseen)
        "command": [*TRIAL, "trainer.max_epochs=2", "trainer.max_steps=40"],
    }
    sweeper = subprocess.Popen(
        [sys.executable, "-c", SWEEPER % (config,), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, db = time.monotonic() + 180, None
    while time.monotonic() < deadline:  # two runs finished, two more going
        found = list((tmp_path / "sweeps").glob("*/sweep.db"))
        runs = SweepStore(found[0]).runs() if found else []
        if (
            sum(r.state == "finished" for r in runs) >= 2
            and sum(r.state == "running" for r in runs) == 2
        ):
            db = found[0]
            break
        time.sleep(0.2)
    assert db is not None, "the sweep never got going"
    # the machine dies: the sweep command, its agents and their trials, all at once (an agent
    # left alive would go on with the old optimizer lease)
    doomed = [psutil.Process(sweeper.pid)]
    doomed += doomed[0].children(recursive=True)
    for process in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    sweeper.wait()
    psutil.wait_procs(doomed, timeout=30)
    store = SweepStore(db)
    before = store.runs()  # after the kill: nothing changes the store any more
    finished_before = {r.id for r in store.runs() if r.state == "finished"}
    queued_before = {s.seq for s in SuggestionQueue(store).queued()}

    res = run_sweep(
        {}, SweepOptions(sweep_id=db.parent.name, agents=2, rerun_crashed=True), root=tmp_path
    )
    live = [r for r in store.runs() if not r.superseded]
    assert len(live) == 8 and all(r.state == "finished" for r in live)
    assert len({r.params["optimizer.lr"] for r in live}) == 8  # nothing lost or repeated
    assert finished_before <= {r.id for r in live}
    new = [
        r
        for r in live
        if r.id not in {b.id for b in before}
        and not r.rerun_of
        and r.search_info["suggestion"] not in queued_before
    ]
    assert new, "the resumed sweep suggested no new run"
    for run in new:  # suggested by the rebuilt optimizer, which knew the earlier results
        assert run.search_info["lease_generation"] >= 2
        assert run.search_info["results_known"] >= len(finished_before)
    # the leaderboard of the resumed command lists the whole sweep: the runs before the kill too
    assert {e["id"] for e in res["runs"]} == {r.id for r in live}


def test_engine_ax_runs_a_small_sweep_when_installed(tmp_path):
    if os.environ.get("TRAINER_REQUIRE_AX") != "1":
        pytest.importorskip("ax", reason="Ax is the optional extra [ax]")
    config = {
        "method": "custom",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "run_cap": 3,
        "scheduler": {"engine": "ax"},
        "parameters": {"optimizer.lr": LR, "optimizer.momentum": {"min": 0.5, "max": 0.99}},
        "command": QUICK,
    }
    res = run_sweep(config, SweepOptions(agents=1), root=tmp_path)
    assert [r["state"] for r in res["runs"]] == ["finished"] * 3
    assert res["engine"].startswith("W&B scheduler optimizer, engine ax (ax-platform ")
    assert all(0.5 <= r["params"]["optimizer.momentum"] <= 0.99 for r in res["runs"])
