"""sweep.png: a title naming sweep, method, metric and goal; a best-so-far curve over integer
run ticks; categorical parameters on a categorical axis; hyperband-stopped runs marked."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt

from trainer.sweep.report import leaderboard
from trainer.sweep.store.database import SweepStore

CONFIG = {
    "method": "random",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {
        "optimizer": {"values": ["sgd", "adamw"]},
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
    },
    "early_terminate": {"type": "hyperband", "min_iter": 1},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
}
RUNS = [
    ("adamw", 1e-3, 0.5, "finished"),
    ("sgd", 1e-2, 0.3, "stopped"),
    ("sgd", 1e-1, 0.7, "finished"),
]


def _store(tmp_path) -> SweepStore:
    store = SweepStore(tmp_path / "sweep.db")
    store.set("config", CONFIG)
    for i, (opt, lr, acc, state) in enumerate(RUNS):
        params = {"optimizer": opt, "optimizer.lr": lr}
        run = store.claim(
            lambda runs, p=params: (p, None), new_id=lambda i=i: f"r{i}", agent_pid=os.getpid()
        )
        store.add_metrics(run.id, [{"epoch": 1, "val/acc": acc}], 0)
        store.update(run.id, state=state, ended_at=100.0 + i)
    return store


def test_the_figure_has_title_best_so_far_integer_ticks_categories_and_stops(tmp_path):
    store = _store(tmp_path)
    res = leaderboard.results(store, "s1")
    fig = leaderboard.figure(store, res)
    assert fig._suptitle.get_text() == "sweep s1 (random): val/acc, goal maximize"
    categorical, lr, over_runs = fig.axes
    assert [t.get_text() for t in categorical.get_xticklabels()] == ["sgd", "adamw"]
    assert lr.get_xscale() == "log"
    (curve,) = [line for line in over_runs.get_lines() if line.get_label() == "best so far"]
    assert list(curve.get_ydata()) == [0.5, 0.5, 0.7]
    ticks = [t for t in over_runs.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    for ax in (categorical, over_runs):
        labels = {c.get_label(): c for c in ax.collections}
        assert {"run", "stopped by hyperband", "best"} <= set(labels)
        assert labels["stopped by hyperband"].get_offsets()[:, 1].tolist() == [0.3]
    assert labels["best"].get_offsets().tolist() == [[3.0, 0.7]]
    plt.close(fig)
    assert leaderboard.plot(store, res, tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
