"""benchmarks/sweep_scale.py: one simulated agent's store calls against a real SQLite store in
this process (fast), the bulk pre-fill, and the whole benchmark with tiny rounds (slow: it
starts worker processes)."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks import sweep_scale
from trainer.sweep.store.opening import open_store

PLAN = {"trial_s": 60.0, "epochs": 4, "heartbeat_s": 2.0, "speedup": 600.0, "seed": "t"}


def test_a_simulated_agent_claims_reports_and_finishes_every_run_it_gets(tmp_path):
    sweep_scale._count_statements()
    store = open_store(tmp_path / "sweep")
    now = time.time()
    plan = PLAN | {"stop_check": "poll", "go": now, "deadline": now + 0.6}
    agent = sweep_scale.SimulatedAgent(store, plan, 0)
    agent.run()
    assert not agent.errors and agent.handed and not agent.unfinished
    assert all(agent.times[k] for k in ("claim", "heartbeat", "report", "stop_check", "finish"))
    assert len(agent.statements) == len(agent.handed) and min(agent.statements) > 0
    runs = store.runs()
    assert [r.id for r in runs] == agent.handed
    assert {r.state for r in runs} == {"finished"} and len(runs[0].history) == 4
    store.close()


def test_the_prefill_writes_finished_runs_with_their_history(tmp_path):
    store = open_store(tmp_path / "sweep")
    sweep_scale.prefill(store, 7, 3)
    runs = store.runs()
    assert len(runs) == 7 and {r.state for r in runs} == {"finished"}
    assert all(len(r.history) == 3 for r in runs)
    store.close()


@pytest.mark.slow
def test_sweep_scale_writes_one_object_per_round(tmp_path):
    args = ["--agents", "2", "--backends", "sqlite", "--finished-rows", "20", "--duration-s", "2"]
    sweep_scale.main([*args, "--speedup", "120", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "sweep_scale.json").read_text())
    rounds = saved["rounds"]
    assert [(r["agents"], r["finished_rows"]) for r in rounds] == [(2, 0), (2, 20)]
    for r in rounds:
        assert r["handouts"] > 0 and r["duplicates"] == 0 and r["losses"] == 0
        assert r["db_cpu_ms_per_handout"] is None and r["claim_p99_ms"] > 0
    assert "n/a (in the client)" in (tmp_path / "sweep_scale.md").read_text()
