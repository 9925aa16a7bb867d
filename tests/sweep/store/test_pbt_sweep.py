"""A 4-member PBT sweep on digits with compile=default, end to end, on SQLite and on a real
PostgreSQL server: members copy leaders (the lineage says so), keep their compiled graphs (0
recompiles), and results.json and the leaderboard give each member's schedule."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

SWEEP = [
    "-m",
    "hydra/sweeper=wandb",
    "hydra.sweeper.method=pbt",
    "hydra.sweeper.metric={name: val/acc, goal: maximize}",
    "hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, min: 0.0005, "
    "max: 0.5}, trainer.label_smoothing: {values: [0.0, 0.05, 0.1]}}",
    "hydra.sweeper.pbt.quantile=0.5",
    "data=digits",
    "model=small_cnn",
    "compile=default",
    "logger=none",
    "trainer.max_epochs=3",
]


@pytest.mark.parametrize(
    ("store", "compiled_update"),
    [("sqlite", False), ("sqlite", True), ("postgresql", False)],
    ids=["sqlite", "sqlite-compile.optimizer", "postgresql"],
)
def test_a_pbt_sweep_copies_leaders_without_recompiling(store, compiled_update, tmp_path, request):
    """compile.optimizer=true: the compiled update keeps its graph as the learning rate
    changes (a tensor) and a leader's optimizer state loads into the same tensors."""
    extra = [f"compile.optimizer={str(compiled_update).lower()}"]
    if store == "postgresql":
        url = request.getfixturevalue("postgres").url()
        extra += [f"hydra.sweeper.storage='{url}'"]  # quoted: its query has a =
    done = run_cli(*SWEEP, *extra, f"paths.output_dir={tmp_path}", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads(next(tmp_path.glob("sweeps/*/results.json")).read_text())
    assert res["method"] == "pbt" and len(res["runs"]) == 4
    assert all(r["state"] == "finished" and r["epochs"] == 3 for r in res["runs"])
    steps = [s for r in res["runs"] for s in r["lineage"]]
    assert {s["epoch"] for s in steps} == {0, 1, 2}
    copies = [s for s in steps if s["copied_from"]]
    assert copies, steps  # quantile 0.5: the worse of two members at a boundary copies
    ids = {r["id"] for r in res["runs"]}
    assert all(s["copied_from"] in ids and s["leader_score"] >= s["score"] for s in copies)
    for run in res["runs"]:
        summary = json.loads((tmp_path / run["run_dir"] / "summary.json").read_text())
        compiled = summary["compile"]
        assert compiled["enabled"] and compiled["recompiles"] == 0, compiled["recompile_reasons"]
        assert compiled["optimizer"] is compiled_update
        last = run["lineage"][-1]["params"]
        config = summary["config"]  # the checkpoint's config follows the explored values
        assert config["optimizer"]["lr"] == pytest.approx(last["optimizer.lr"])
        assert config["trainer"]["label_smoothing"] == last["trainer.label_smoothing"]
    assert f"pbt: 4 members, {len(copies)} copies of a leader; schedule of" in done.stdout
    sweep_yaml = next(tmp_path.glob("sweeps/*/sweep.yaml")).read_text()
    assert sweep_yaml.startswith("# pbt: ") and "\nmethod: random\n" in sweep_yaml


def test_a_member_killed_with_its_agent_resumes_by_id_with_its_lineage(tmp_path):
    """kill -9 of the sweep command, its agent and a member mid-run, after it copied a leader
    (its values are the lineage's, not the ones the sweep started it with); `python -m
    trainer.agent ID` resumes that member in place from its last.pt, with the values its
    lineage gives, and trains the rest of the population."""
    import contextlib
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from trainer.sweep.store.database import SweepStore

    argv = [sys.executable, "-m", "trainer", *SWEEP[:-2], "compile=off", "trainer.max_epochs=4"]
    argv += ["data.batch_size=32", f"paths.output_dir={tmp_path}"]
    sweeper = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline, victim, db = time.monotonic() + 300, None, None
    while time.monotonic() < deadline and victim is None:  # a member that copied, mid-run
        found = list(tmp_path.glob("sweeps/*/sweep.db"))
        runs = SweepStore(found[0]).runs() if found else []
        for run in (r for r in runs if r.state == "running"):
            lineage = found[0].parent / "pbt" / run.id / "lineage.json"
            steps = json.loads(lineage.read_text()) if lineage.is_file() else []
            if any(s["copied_from"] for s in steps) and steps[-1]["epoch"] < 3:
                victim, db = run.id, found[0]  # its values are no longer the sweep's
        time.sleep(0.1)
    assert victim is not None, "no member copied a leader before its last decision"
    doomed = [psutil.Process(sweeper.pid), *psutil.Process(sweeper.pid).children(recursive=True)]
    for process in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(doomed, timeout=30)
    agent = subprocess.run(
        [sys.executable, "-m", "trainer.agent", db.parent.name, "--root", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert agent.returncode == 0, agent.stdout[-3000:] + agent.stderr[-3000:]
    assert f"resuming run {victim}" in agent.stdout
    res = json.loads((db.parent / "results.json").read_text())
    assert len(res["runs"]) == 4 and all(r["state"] == "finished" for r in res["runs"])
    (entry,) = [r for r in res["runs"] if r["id"] == victim]
    assert entry["losses"] == 1 and entry["epochs"] == 4
    assert [s["epoch"] for s in entry["lineage"]] == [0, 1, 2, 3]
    summary = json.loads((db.parent / "runs" / victim / "summary.json").read_text())
    last = entry["lineage"][-1]["params"]
    assert summary["config"]["optimizer"]["lr"] == pytest.approx(last["optimizer.lr"])
