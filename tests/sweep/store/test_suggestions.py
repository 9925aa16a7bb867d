"""The optimizer lease and the suggestion queue in the sweep store, in-process (no trials): one
holder drives the optimizer, a dead holder's lease is taken over and the optimizer rebuilt from
the stored runs, and every queued suggestion is claimed exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainer.sweep.search.suggest.driver import SchedulerDriver, SchedulerEngine
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout
from trainer.sweep.store.suggestions import SuggestionQueue

CONFIG = {
    "method": "custom",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "run_cap": 6,
    "parameters": {"optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1}},
    "scheduler": {"engine": "optuna"},
    "command": [],
}


@pytest.fixture
def sweep(tmp_path):
    layout = SweepLayout(tmp_path / "sweep")
    store = SweepStore(layout.db)
    store.set("config", CONFIG)
    return layout, store


@pytest.fixture
def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _finish(store: SweepStore, run_id: str, acc: float) -> None:
    store.add_metrics(run_id, [{"val/acc": acc / 2}, {"val/acc": acc}], 0)
    store.update(run_id, state="finished")


def _claim(engine: SchedulerEngine):
    return engine.claim(agent_pid=os.getpid(), rerun_crashed=False, stop=lambda: False)


@pytest.mark.slow
def test_one_holder_drives_and_a_dead_holders_lease_is_taken_over(sweep, dead_pid):
    layout, store = sweep
    first = SchedulerEngine(store, layout, CONFIG, "s1")
    runs = [_claim(first) for _ in range(3)]
    for i, run in enumerate(runs[:2]):
        _finish(store, run.id, 0.5 + i / 10)
    queue = SuggestionQueue(store)
    assert queue.lease()[2] == 1  # generation 1: the first holder
    other = SchedulerDriver(SweepStore(layout.db), layout, CONFIG, "s1")
    other.step(force=True)
    assert other.session is None and other.generation is None  # a live holder keeps it

    with store.transaction() as db:  # the holder dies: its lease names a dead process
        db.exec_driver_sql("UPDATE optimizer_lease SET pid = ?", (dead_pid,))
    other.queue.wait(os.getpid(), True)
    other.step(force=True)
    assert other.generation == 2
    study = other.session._optimizer.study
    told = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(t.value for t in told) == [0.5, 0.6]  # rebuilt from the stored runs
    assert runs[2].id in other.tracked  # the running run is adopted
    (queued,) = other.queue.queued()
    assert queued.info["lease_generation"] == 2 and queued.info["results_known"] == 2
    other.close()
    first.close()


@pytest.mark.slow
def test_queued_suggestions_are_claimed_once_and_adopted_after_a_takeover(sweep, dead_pid):
    layout, store = sweep
    driver = SchedulerDriver(store, layout, CONFIG, "s1")
    queue = driver.queue
    for pid in (os.getpid(), dead_pid + 1_000_000):  # one live waiting agent (and a stale row)
        queue.wait(pid, True)
    driver.step(force=True)
    assert len(queue.queued()) == 1
    with store.transaction() as db:
        db.exec_driver_sql("UPDATE optimizer_lease SET pid = ?", (dead_pid,))
    driver.session = None  # as if this process had died with the lease
    driver.spare = None
    successor = SchedulerDriver(SweepStore(layout.db), layout, CONFIG, "s1")
    successor.step(force=True)
    assert list(successor.queued) == [queue.queued()[0].seq]  # adopted
    claims = [
        SuggestionQueue(SweepStore(layout.db)).claim(
            new_id=lambda i=i: f"r{i}", agent_pid=os.getpid(), rerun_crashed=False
        )
        for i in range(2)
    ]
    assert claims[0] is not None and claims[1] is None  # handed out exactly once
    assert claims[0].search_info["suggestion"] == list(successor.queued)[0]
    successor.step(force=True)
    assert claims[0].id in successor.tracked
    successor.close()


def test_the_search_ends_at_run_cap_and_says_why(sweep):
    layout, store = sweep
    config = {**CONFIG, "run_cap": 2}
    store.set("config", config)
    engine = SchedulerEngine(store, layout, config, "s1")
    for _ in range(2):
        _finish(store, _claim(engine).id, 0.9)
    assert _claim(engine) is None
    assert engine.over() == "run_cap 2 reached"
    engine.close()
    queue = SuggestionQueue(store)
    assert queue.takeable() and queue.lease()[0] == ""  # handed back on close
    with store.transaction() as db:  # the next holder's generation follows
        assert queue.hold(db, "next", os.getpid()) == 2


@pytest.mark.slow
def test_a_lease_of_another_host_lapses_only_when_its_renewals_stop(sweep, dead_pid):
    """The holder's PID means nothing here: a fresh lease of host node-b is kept whatever runs
    under that PID here; once it has not been renewed for LEASE_S, it may be taken."""
    import time

    from trainer.sweep.store.suggestions import LEASE_S

    _, store = sweep
    queue = SuggestionQueue(store)
    with store.transaction() as db:
        assert queue.hold(db, "theirs", os.getpid()) == 1
        db.exec_driver_sql("UPDATE optimizer_lease SET host = 'node-b', pid = ?", (dead_pid,))
    assert not queue.takeable()
    with store.transaction() as db:
        assert queue.hold(db, "mine", os.getpid()) is None  # held elsewhere
        db.exec_driver_sql(
            "UPDATE optimizer_lease SET renewed_at = ?", (time.time() - LEASE_S - 1,)
        )
    assert queue.takeable()
    with store.transaction() as db:
        assert queue.hold(db, "mine", os.getpid()) == 2
    assert queue.lease().holder.here


@pytest.mark.slow
def test_waiting_agents_of_another_host_count_while_they_look_for_runs(sweep, dead_pid):
    import time

    from trainer.sweep.store.suggestions import LEASE_S

    _, store = sweep
    queue = SuggestionQueue(store)
    queue.wait(os.getpid(), True)
    with store.transaction() as db:
        db.exec_driver_sql(
            "INSERT INTO waiting_agents (host, pid, since, heartbeat_at) VALUES (?, ?, ?, ?)",
            ("node-b", dead_pid, time.time(), time.time()),
        )
    assert queue.waiting() == 2
    with store.transaction() as db:
        db.exec_driver_sql(
            "UPDATE waiting_agents SET heartbeat_at = ? WHERE host = 'node-b'",
            (time.time() - LEASE_S - 1,),
        )
    assert queue.waiting() == 1  # silent for LEASE_S: gone
    queue.wait(os.getpid(), False)
    assert queue.waiting() == 0


def test_an_old_store_keeps_its_lease_and_waiting_agents(tmp_path):
    """Tables written before holders had hosts and start times: the lease and the waiting
    agents survive the migration, judged as this host's by PID."""
    import sqlite3
    import time

    layout = SweepLayout(tmp_path / "sweep")
    SweepStore(layout.db).close()
    db = sqlite3.connect(layout.db)
    db.executescript(
        "DROP TABLE optimizer_lease; DROP TABLE waiting_agents;"  # as the old release had them
        "CREATE TABLE optimizer_lease (one INTEGER PRIMARY KEY CHECK (one = 1), token TEXT NOT "
        "NULL, pid INTEGER NOT NULL, generation INTEGER NOT NULL, renewed_at REAL NOT NULL);"
        "CREATE TABLE waiting_agents (pid INTEGER PRIMARY KEY, since REAL NOT NULL);"
    )
    db.execute("INSERT INTO optimizer_lease VALUES (1, 'old', ?, 3, ?)", (os.getpid(), time.time()))
    db.execute("INSERT INTO waiting_agents VALUES (?, ?)", (os.getpid(), time.time()))
    db.commit()
    db.close()
    store = SweepStore(layout.db)
    queue = SuggestionQueue(store)
    lease = queue.lease()
    assert (lease.token, lease.generation, lease.host) == ("old", 3, None)
    assert not queue.takeable()  # this process, alive, renewed just now
    assert queue.waiting() == 1
