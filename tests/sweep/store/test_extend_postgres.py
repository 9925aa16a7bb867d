"""`extend` and a warm start on sweeps kept in PostgreSQL, from a machine without their
directory (--storage / hydra.sweeper.storage), as on SQLite."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.definition.warm_start import WarmStartError, gather
from trainer.sweep.search import space
from trainer.sweep.store.directory import SweepLayout, new_id
from trainer.sweep.store.opening import open_store

pytestmark = pytest.mark.slow  # starts PostgreSQL
CONFIG = {
    "method": "bayes",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.1}},
    "run_cap": 2,
}


def _finished(url, where, sweep_id):
    store = open_store(where, url, sweep_id)
    store.set("config", CONFIG)
    store.set("sweep_id", sweep_id)
    for lr, acc in ((0.003, 0.6), (0.03, 0.8)):
        run = store.claim(
            lambda _r, lr=lr: ({"optimizer.lr": lr}, None), new_id=new_id, agent_pid=os.getpid()
        )
        store.add_metrics(run.id, [{"val/acc": acc}], 0)
        store.update(run.id, state="finished", exit_code=0, ended_at=time.time())
    store.set("state", "finished")
    return store


def test_extend_and_warm_start_a_sweep_kept_in_postgresql(postgres, tmp_path, capsys):
    url, sweep_id = postgres.url(), "pg" + uuid.uuid4().hex[:8]
    store = _finished(url, tmp_path / "host-a", sweep_id)
    elsewhere = ["--root", str(tmp_path / "host-b"), "--storage", url]  # no directory there
    assert sweep_cli([*elsewhere, "extend", sweep_id, "hydra.sweeper.run_cap=4", "--no-run"]) == 0
    assert store.config["run_cap"] == 4 and space.revision(store) == 2
    assert store.lifecycle()[0] == "running"
    here = SweepLayout.under(tmp_path / "host-b", sweep_id)
    assert "run_cap: 2" in here.revision(1).read_text()  # its files go to its directory here
    warm = gather(sweep_id, CONFIG, tmp_path / "host-c", url)
    assert warm.sweeps == [sweep_id] and len(warm.prior_runs) == 2
    with pytest.raises(WarmStartError, match=f"did you mean {sweep_id}"):
        gather(sweep_id + "x", CONFIG, tmp_path / "host-c", url)
    store.close()
