"""A finished bayes sweep (two runs, recorded through its store) grown in place with `python -m trainer.sweep extend`, and a new sweep
warm-started from it: real agents and tiny trials (small_cnn on digits, compile off, 4 steps).
The engine is told the old runs (each new run's search_info counts the finished runs its model
was fitted on); none is run again."""

from __future__ import annotations

import json

import pytest

from tests.sweep.finished_sweep import finished_sweep
from tests.sweep_commands import TRIAL
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout

pytestmark = pytest.mark.slow
CONFIG = {
    "method": "bayes",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 0.001, "max": 0.1}
    },
    "run_cap": 2,
    "command": [*TRIAL, "trainer.max_epochs=1", "trainer.max_steps=4"],
}


OLD = [({"optimizer.lr": 0.003}, 0.6), ({"optimizer.lr": 0.03}, 0.8)]  # two finished runs


def test_extend_a_finished_bayes_sweep_by_four_runs(tmp_path, capsys):
    root = tmp_path
    sweep_id, _ = finished_sweep(root, CONFIG, OLD)
    layout = SweepLayout.under(root, sweep_id)
    before = SweepStore(layout.db).runs()
    code = sweep_cli(
        [
            "--root",
            str(root),
            "extend",
            sweep_id,
            "hydra.sweeper.run_cap=6",
            "hydra.sweeper.agents=2",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "revision 2" in out and "told the 2 finished run(s) inside the new space" in out
    runs = SweepStore(layout.db).runs()
    old, new = runs[:2], runs[2:]
    assert [(r.id, r.params) for r in old] == [(r.id, r.params) for r in before]  # kept, not rerun
    assert len(new) == 4 and all(r.state == "finished" for r in runs)
    assert all(r.search_info["results_known"] >= 2 for r in new)  # its model knew the old runs
    assert len({json.dumps(r.params) for r in runs}) == 6  # no point run twice
    assert SweepLayout(layout.root).revision(1).is_file()
    assert "run_cap: 2" in layout.revision(1).read_text()
    assert "run_cap: 6" in layout.yaml.read_text()
    res = json.loads(layout.results.read_text())
    assert [(r["revision"], r["file"], r["runs_before"]) for r in res["revisions"]] == [
        (1, "sweep.r1.yaml", 0),
        (2, "sweep.yaml", 2),
    ]
    assert res["revisions"][1]["changes"] == {"run_cap": [2, 6]}
    assert res["state"] == "finished" and len(res["runs"]) == 6


def test_warm_start_seeds_a_new_bayes_sweep(tmp_path):
    root = tmp_path
    sweep_id, _ = finished_sweep(root, CONFIG, OLD)
    options = SweepOptions(agents=1, warm_start=sweep_id)
    res = run_sweep({**CONFIG, "run_cap": 1}, options, root=root)
    assert res["warm_start"] == {"sweeps": [sweep_id], "prior_runs": 2}
    (run,) = SweepStore(SweepLayout.under(root, res["sweep_id"]).db).runs()
    assert run.search_info["results_known"] == 2  # the earlier sweep's two runs, told first
