"""Every table the project prints stays whole at 80 columns, as a user's terminal shows it
(COLUMNS=80, a real process): run ids, states and numbers are never cut; columns are left out by
priority and paths go on their own line; a wider terminal shows everything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.sweep.report.test_pareto import CONFIG, RUNS

IDS = ["tmy8n0qz", "c66abcde", "x9y8z7w6", "k3j4h5g6"]


def _cli(module: str, *args: str, columns: int, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _sweep(directory: Path, sweep_id: str) -> None:
    """A finished two-objective sweep of four runs with W&B-style ids."""
    from trainer.sweep.store.database import SweepStore

    directory.mkdir(parents=True, exist_ok=True)
    store = SweepStore(directory / "sweep.db")
    store.set("config", CONFIG)
    store.set("sweep_id", sweep_id)
    for run_id, (batch, acc, ms, state) in zip(IDS, RUNS, strict=True):
        run = store.claim(
            lambda runs, b=batch: ({"data.batch_size": b}, None),
            new_id=lambda r=run_id: r,
            agent_pid=os.getpid(),
        )
        store.add_metrics(run.id, [{"val/acc": acc, "perf/step_ms": ms}], 0)
        store.update(run.id, state=state, started_at=1000.0, ended_at=2234.5)
    store.close()


def _whole(text: str) -> None:
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text


def test_two_objective_leaderboard_at_80_columns_and_wide(tmp_path):
    _sweep(tmp_path / "outputs" / "sweeps" / "abcd1234", "abcd1234")
    narrow = _cli("trainer.sweep", "show", "abcd1234", columns=80, cwd=tmp_path)
    _whole(narrow)
    rows = {line.split()[3]: line for line in narrow.splitlines() if line.startswith("│")}
    assert set(rows) == set(IDS)  # every id whole, in its own cell
    assert "finished" in rows["tmy8n0qz"] and "pruned" in rows["k3j4h5g6"]
    assert "perf/step_ms" in narrow and "0.95" in rows["tmy8n0qz"]
    assert "not shown at 80 columns" in narrow
    wide = _cli("trainer.sweep", "show", "abcd1234", columns=200, cwd=tmp_path)
    assert "cache hit/miss" in wide and "not shown" not in wide


def test_sweep_ls_at_80_columns_names_ids_and_puts_paths_on_their_own_line(tmp_path):
    sweeps = tmp_path / "outputs" / "sweeps"
    _sweep(sweeps / "abcd1234", "abcd1234")
    far = tmp_path / "a" / "rather" / "long" / "path" / "to" / "the" / "users" / "own" / "dir"
    _sweep(far, "efgh5678")
    (sweeps / "efgh5678").symlink_to(far)
    _sweep(sweeps / "mine", "ijkl9012")  # a hydra.sweep.dir under sweeps/: listed by its id
    (sweeps / "ijkl9012").symlink_to(sweeps / "mine")
    out = _cli("trainer.sweep", "ls", columns=80, cwd=tmp_path)
    _whole(out)
    for sweep_id in ("abcd1234", "efgh5678", "ijkl9012"):
        assert f"│ {sweep_id} │" in out
    assert "efgh5678 lives in a/rather/long/path/to/the/users/own/dir" in out
    assert "ijkl9012 lives in outputs/sweeps/mine" in out and "│ mine" not in out


def test_cache_ls_at_80_columns_keeps_run_ids_whole(tmp_path):
    from trainer.cache.bundle import Bundle, BundleLayout
    from trainer.cache.key import key_id, machine_key

    cache = tmp_path / "cache"
    bundle, here = Bundle(BundleLayout(cache, in_cache=True)), machine_key("cpu")
    for i, run_id in enumerate(IDS):
        name = f"inductor/fxgraph/a{i}/entry"
        (cache / name).parent.mkdir(parents=True)
        (cache / name).write_text("graph")
        record = {"workload": {"model": {"name": "mobilenet_v3_small"}}, "run": run_id,
                  "workload_id": "3f2a9c1b7e4d5a60", "label": "mobilenet_v3_small",
                  "files": {name: 5}}  # fmt: skip
        bundle.add(key_id(here), here, cache, [name], record)
    out = _cli("trainer.cache", "--cache-dir", str(cache), "ls", columns=80, cwd=tmp_path)
    _whole(out)
    cells = " ".join(out.replace("│", " ").split())
    assert "mobilenet_v3_small" in cells and "3f2a9c1b7e4d5a60" in cells
    assert all(run_id in cells for run_id in IDS)
