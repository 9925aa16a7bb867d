"""Multi-objective sweeps: the Pareto front (pure), and what results.json, best.yaml, the
leaderboard, `ls` and sweep.png make of it; pruned runs in the leaderboard."""

from __future__ import annotations

import json
import os

import matplotlib.pyplot as plt
import pytest
import yaml
from rich.console import Console

from trainer.sweep.__main__ import ls
from trainer.sweep.report import leaderboard, pareto
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout

GOALS = [{"name": "val/acc", "goal": "maximize"}, {"name": "perf/step_ms", "goal": "minimize"}]


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ({"a": [0.9, 5.0], "b": [0.8, 3.0], "c": [0.7, 4.0]}, ["a", "b"]),  # c: b beats it on both
        ({"a": [0.9, 5.0], "b": [0.9, 5.0]}, ["a", "b"]),  # equal points dominate neither
        ({"a": [0.9, 5.0], "b": [0.9, 6.0]}, ["a"]),  # as good on one, better on the other
        ({"a": [float("nan"), 1.0], "b": [0.5, None]}, []),  # no usable values: no front
    ],
)
def test_the_front_holds_the_runs_no_other_run_dominates(points, front):
    assert pareto.front(points, GOALS) == front


CONFIG = {
    "method": "custom",
    "metrics": GOALS,
    "scheduler": {"engine": "optuna"},
    "parameters": {"data.batch_size": {"values": [16, 64, 256]}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}", "compile=off"],
}
RUNS = [  # batch size, val/acc, step ms, state
    (16, 0.95, 9.0, "finished"),
    (64, 0.90, 4.0, "finished"),
    (256, 0.60, 5.0, "finished"),  # dominated by the 64 run
    (16, 0.10, 9.5, "pruned"),
]


def _store(tmp_path) -> SweepStore:
    store = SweepStore(tmp_path / "sweep.db")
    store.set("config", CONFIG)
    for i, (batch, acc, ms, state) in enumerate(RUNS):
        run = store.claim(
            lambda runs, b=batch: ({"data.batch_size": b}, None),
            new_id=lambda i=i: f"r{i}",
            agent_pid=os.getpid(),
        )
        store.add_metrics(run.id, [{"val/acc": acc, "perf/step_ms": ms}], 0)
        store.update(run.id, state=state, ended_at=100.0 + i)
    return store


def test_results_best_yaml_leaderboard_and_figure_show_the_front(tmp_path):
    store = _store(tmp_path)
    res = leaderboard.write(store, "s1", SweepLayout(tmp_path))
    assert [e["id"] for e in res["pareto_front"]] == ["r0", "r1"]
    assert [e["id"] for e in res["runs"]][:2] == ["r0", "r1"]  # the front leads the table
    assert res["best"] is None and res["metrics"] == GOALS
    assert {e["id"]: e["state"] for e in res["runs"]}["r3"] == "pruned"
    assert json.loads((tmp_path / "results.json").read_text())["pareto_front"][1]["objectives"] == {
        "val/acc": 0.9,
        "perf/step_ms": 4.0,
    }
    text = (tmp_path / "best.yaml").read_text()
    assert "# r1: python -m trainer compile=off data.batch_size=64" in text
    assert yaml.safe_load(text) == {
        "r0": ["compile=off", "data.batch_size=16"],
        "r1": ["compile=off", "data.batch_size=64"],
    }
    console = Console(width=200, record=True)
    leaderboard.print_leaderboard(res, console)
    out = console.export_text()
    assert "pareto" in out and "perf/step_ms" in out and "pareto: r1  val/acc=0.9" in out
    fig = leaderboard.figure(store, res)
    front, batch, _ = fig.axes
    assert (front.get_xlabel(), front.get_ylabel()) == ("val/acc", "perf/step_ms")
    labels = {c.get_label(): c for c in batch.collections}
    assert labels["pareto front"].get_offsets()[:, 1].tolist() == [0.95, 0.9]
    assert labels["pruned"].get_offsets()[:, 1].tolist() == [0.1]
    assert "Pareto front" in fig._suptitle.get_text()
    plt.close(fig)


def test_ls_names_the_objectives_and_the_size_of_the_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per sweep
    root = tmp_path / "outputs"
    (root / "sweeps" / "s1").mkdir(parents=True)
    _store(root / "sweeps" / "s1").close()
    ls(root)
    out = capsys.readouterr().out
    assert "val/acc (maximize)" in out and "Pareto front: 2" in out and "4 (1 pruned)" in out
