"""`python -m trainer.sweep ls` says `finished` only when no agent could get another run."""

from __future__ import annotations

import os

import pytest

from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.search import classic
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id

RANDOM = {
    "method": "random",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"lr": {"distribution": "uniform", "min": 0.0, "max": 1.0}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
    "run_cap": 4,
}


def _sweep(root, runs: int) -> SweepStore:
    store = SweepStore(root / "sweeps" / "s1" / "sweep.db")
    store.set("config", RANDOM)
    store.set("sweep_id", "s1")
    for _ in range(runs):
        run = _claim(store)
        store.update(run.id, state="finished")
    store.set("state", "finished")  # what the agents ending left behind
    return store


def _claim(store):
    return store.claim(
        lambda runs: classic.next_params(store.config, runs), new_id=new_id, agent_pid=os.getpid()
    )


def _listing(root, capsys) -> str:
    capsys.readouterr()
    assert sweep_cli(["--root", str(root), "ls"]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_three_of_four_runs_is_stopped_and_an_agent_still_gets_a_run(tmp_path, capsys):
    store = _sweep(tmp_path, 3)
    listing = _listing(tmp_path, capsys)
    assert "stopped (3/4 runs)" in listing and "finished" not in listing
    assert _claim(store) is not None  # consistent: the sweep does have a run left
    store.update(store.runs()[-1].id, state="finished")
    listing = _listing(tmp_path, capsys)
    assert "finished" in listing and "stopped" not in listing
    assert _claim(store) is None
    store.close()


def test_states_other_than_finished_pass_through():
    assert classic.sweep_state("failed", RANDOM, []) == "failed"
    assert classic.sweep_state("created", RANDOM, []) == "created"
    uncapped = {k: v for k, v in RANDOM.items() if k != "run_cap"}
    assert classic.sweep_state("finished", uncapped, []) == "stopped (0 runs, more left)"
