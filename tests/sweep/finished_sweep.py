"""A finished local sweep made through its store's own calls (claim, metrics, end), no trial
run: the earlier sweep that `extend` grows and a warm start reads, in a second."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import create, new_id, write_sweep_yaml
from trainer.sweep.store.opening import open_store


def finished_sweep(
    root: Path, config: dict[str, Any], runs: list[tuple[dict[str, Any], float]]
) -> tuple[str, SweepStore]:
    """Sweep `config` under <root>/sweeps/<id>/, ended `finished` with one finished run per
    (params, val/acc) of `runs`: its id and store."""
    sweep_id = new_id()
    layout = create(root, sweep_id, None)
    store = open_store(layout.root)
    store.set("config", config)
    store.set("sweep_id", sweep_id)
    store.set("created_at", time.time())
    write_sweep_yaml(config, layout.yaml)
    for params, acc in runs:
        run = store.claim(lambda _runs, p=params: (p, None), new_id=new_id, agent_pid=os.getpid())
        store.add_metrics(
            run.id, [{"val/acc": acc / 2, "val/loss": 1.0}, {"val/acc": acc, "val/loss": 0.5}], 0
        )
        store.update(run.id, state="finished", exit_code=0, ended_at=time.time())
    store.set("state", "finished")
    return sweep_id, store
