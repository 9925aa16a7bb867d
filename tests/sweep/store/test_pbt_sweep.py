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


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_pbt_sweep_copies_leaders_without_recompiling(store, tmp_path, request):
    storage = []
    if store == "postgresql":
        url = request.getfixturevalue("postgres").url()
        storage = [f"hydra.sweeper.storage='{url}'"]  # quoted: its query has a =
    done = run_cli(*SWEEP, *storage, f"paths.output_dir={tmp_path}", cwd=tmp_path, timeout=600)
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
        assert summary["compile"]["enabled"] and summary["compile"]["recompiles"] == 0, run["id"]
        last = run["lineage"][-1]["params"]
        config = summary["config"]  # the checkpoint's config follows the explored values
        assert config["optimizer"]["lr"] == pytest.approx(last["optimizer.lr"])
        assert config["trainer"]["label_smoothing"] == last["trainer.label_smoothing"]
    assert f"pbt: 4 members, {len(copies)} copies of a leader; schedule of" in done.stdout
    sweep_yaml = next(tmp_path.glob("sweeps/*/sweep.yaml")).read_text()
    assert sweep_yaml.startswith("# pbt: ") and "\nmethod: random\n" in sweep_yaml
