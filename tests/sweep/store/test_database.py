"""The SQLite sweep store: runs handed out exactly once, history kept, lost runs found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from trainer.sweep.search import classic
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id

GRID = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"a": {"values": [1, 2, 3, 4]}, "b": {"values": [0.1, 0.2]}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
}


def _store(tmp_path, config=GRID, name="s1") -> SweepStore:
    store = SweepStore(tmp_path / name / "sweep.db")
    store.set("config", config)
    return store


def _claim(store, *, pid=None, rerun_crashed=False):
    return store.claim(
        lambda runs: classic.next_params(store.config, runs),
        new_id=new_id,
        agent_pid=pid or os.getpid(),
        rerun_crashed=rerun_crashed,
    )


def test_grid_is_handed_out_once_then_ends_with_plain_values(tmp_path):
    store = _store(tmp_path)
    seen = []
    while (run := _claim(store)) is not None:
        seen.append((run.params["a"], run.params["b"]))
        assert type(run.params["a"]) is int and type(run.params["b"]) is float
        store.update(run.id, state="finished")
    assert sorted(seen) == sorted((a, b) for a in (1, 2, 3, 4) for b in (0.1, 0.2))


def test_history_and_config_survive_reopening(tmp_path):
    store = _store(tmp_path)
    run = _claim(store)
    store.add_metrics(run.id, [{"val/acc": 0.5}, {"val/acc": 0.6}], 0)
    store.add_metrics(run.id, [{"val/acc": 0.7}], 2)
    store.close()
    again = SweepStore(tmp_path / "s1" / "sweep.db")
    assert again.config == GRID
    assert [h["val/acc"] for h in again.run(run.id).history] == [0.5, 0.6, 0.7]


def test_run_cap_counts_every_run(tmp_path):
    config = {**GRID, "method": "random", "run_cap": 3}
    store = _store(tmp_path, config)
    ids = [_claim(store) for _ in range(5)]
    assert sum(r is not None for r in ids) == 3


CLAIMER = """
import sys, os
from trainer.sweep.store.database import SweepStore
from trainer.sweep.search import classic
from trainer.sweep.store.directory import new_id
store = SweepStore(sys.argv[1])
while (run := store.claim(lambda rs: classic.next_params(store.config, rs), new_id=new_id,
                          agent_pid=os.getpid())) is not None:
    print(run.id, run.params["a"], run.params["b"], flush=True)
    store.update(run.id, state="finished")  # an agent ends its runs (else, gone, they are lost)
"""


@pytest.mark.slow
def test_concurrent_processes_never_get_the_same_run(tmp_path):
    store = _store(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(store.path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    lines = [line for p in procs for line in p.communicate(timeout=120)[0].splitlines()]
    points = [tuple(line.split()[1:]) for line in lines]
    assert len(points) == 8 and len(set(points)) == 8
    assert len(store.runs()) == 8


@pytest.mark.slow
def test_a_lost_run_goes_back_to_the_sweep_and_resumes_in_place(tmp_path):
    """A run whose agent is gone is not its own fault: it goes back as preempted, counted as a
    loss, and the next claim resumes it in place (same id) before any new run; the grid neither
    repeats nor loses its point."""
    store = _store(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = _claim(store)
    lost = _claim(store, pid=dead.pid)
    assert store.mark_lost_runs() == [lost.id]
    gone = store.run(lost.id)
    assert gone.state == "preempted" and gone.losses == 1 and "lost" in gone.log_tail
    assert store.run(mine.id).state == "running"
    again = _claim(store)
    assert again.id == lost.id and again.state == "running" and again.losses == 1
    while _claim(store) is not None:
        pass
    points = [tuple(r.params.values()) for r in store.runs() if not r.superseded]
    assert len(points) == 8 and len(set(points)) == 8


def test_a_run_lost_more_than_max_retries_times_is_crashed_and_says_why(tmp_path):
    """hydra.sweeper.max_retries bounds the losses: lost once more, the run is crashed (not
    handed out again without rerun_crashed) and its log tail says so."""
    import time

    store = _store(tmp_path)
    store.set("max_retries", 1)
    run = _claim(store)
    _as_of_host(store, run.id, "node-b", time.time() - 300)
    assert store.mark_lost_runs() == [run.id]
    assert store.run(run.id).state == "preempted"
    assert _claim(store).id == run.id  # resumed in place
    _as_of_host(store, run.id, "node-b", time.time() - 300)
    assert store.mark_lost_runs() == [run.id]
    crashed = store.run(run.id)
    assert crashed.state == "crashed" and crashed.losses == 2
    assert "max_retries=1" in crashed.log_tail and "rerun_crashed" in crashed.log_tail
    assert _claim(store).id != run.id  # a new point, not the crashed one


def test_a_claim_retried_after_its_reply_was_lost_gets_the_same_run(tmp_path, monkeypatch):
    """The connection drops after the claim's commit: the retried claim (same ticket) returns
    the run the first try handed out, never a second one."""
    from sqlalchemy.exc import OperationalError

    store = _store(tmp_path)
    tries = []
    once = store._claim.__wrapped__

    def lossy(self, *args):
        run = once(self, *args)
        tries.append(run)
        if len(tries) == 1:  # committed; the reply is lost
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        return run

    monkeypatch.setattr(type(store), "_claim", lambda self, *args: _retry(lossy, self, *args))
    run = _claim(store)
    assert len(tries) == 2 and tries[1].id == tries[0].id == run.id
    assert [r.id for r in store.runs()] == [run.id]


def _retry(method, self, *args):
    """What trainer.sweep.store.reconnect.retrying does for a server store: try again."""
    from sqlalchemy.exc import OperationalError

    try:
        return method(self, *args)
    except OperationalError:
        return method(self, *args)


def test_two_sweeps_in_one_root_are_independent(tmp_path):
    one, two = _store(tmp_path, name="a"), _store(tmp_path, config={**GRID, "method": "random"})
    _claim(one)
    assert two.runs() == []
    assert len(one.runs()) == 1


def test_hyperband_stops_a_clearly_worse_running_run(tmp_path):
    config = {**GRID, "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 3}}
    store = _store(tmp_path, config)
    good, bad = _claim(store), _claim(store)
    store.add_metrics(good.id, [{"val/acc": 0.8}, {"val/acc": 0.9}], 0)
    store.update(good.id, state="finished")
    store.add_metrics(bad.id, [{"val/acc": 0.1}], 0)
    assert classic.runs_to_stop(config, store.runs()) == [bad.id]


def test_a_torn_summary_is_no_summary_with_a_warning(tmp_path, capsys):
    from trainer.sweep.agents.local_agent import read_summary

    path = tmp_path / "summary.json"
    assert read_summary(path) is None
    path.write_text('{"val/acc": 0.9')
    assert read_summary(path) is None
    assert str(path) in capsys.readouterr().err
    path.write_text('{"val/acc": 0.9}')
    assert read_summary(path) == {"val/acc": 0.9}


def test_one_run_reads_only_its_own_history_and_the_stop_flag(tmp_path):
    from sqlalchemy import event

    store = SweepStore(tmp_path / "sweep.db")
    ids = iter(["a", "b"])
    for _ in range(2):
        store.claim(lambda runs: ({"x": len(runs)}, None), new_id=lambda: next(ids), agent_pid=1)
    store.add_metrics("a", [{"loss": 1.0}, {"loss": 0.5}], 0)
    store.add_metrics("b", [{"loss": 2.0}], 0)
    statements: list[str] = []
    event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(" ".join(a[2].split()))
    )
    assert store.run("b").history == [{"loss": 2.0}]
    assert any("FROM metrics WHERE metrics.run_id IN" in s for s in statements), statements
    assert [r.history for r in store.runs()] == [[{"loss": 1.0}, {"loss": 0.5}], [{"loss": 2.0}]]
    assert store.stop_requested("a") == 0
    store.request_stop(["a"])
    assert store.stop_requested("a") == 1 and store.run("a").stop_requested


@pytest.mark.slow
def test_a_killed_agent_lingering_as_a_zombie_counts_as_gone():
    import signal
    import subprocess
    import time

    from trainer.sweep.store.liveness import pid_alive as _pid_alive

    proc = subprocess.Popen(["sleep", "30"])
    assert _pid_alive(proc.pid)
    proc.send_signal(signal.SIGKILL)
    # Not reaped (no wait/poll here): a zombie, as when the agent's parent was killed too.
    deadline = time.monotonic() + 10
    while _pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(proc.pid)
    assert Path(f"/proc/{proc.pid}").exists()  # still in the process table
    proc.wait()


def _as_of_host(store, run_id, host, heartbeat_at, **fields):
    """Record `run_id` as held by an agent of `host` (a sweep directory shared by machines)."""
    store.update(run_id, host=host, heartbeat_at=heartbeat_at, **fields)


def test_a_run_of_another_host_is_lost_only_when_its_heartbeat_lapses(tmp_path):
    """Its agent's PID means nothing here: a PID that runs no process here (or runs another one)
    does not make the run lost while its heartbeat is fresh; a stale heartbeat does."""
    import time

    store = _store(tmp_path)
    gone = max(psutil.pids()) + 1000  # no process here has this PID
    fresh, stale = _claim(store), _claim(store)  # then handed to another host's agent
    _as_of_host(store, fresh.id, "node-b", time.time(), agent_pid=gone)
    _as_of_host(store, stale.id, "node-b", time.time() - 300, agent_pid=gone)
    assert store.mark_lost_runs() == [stale.id]
    assert store.run(fresh.id).state == "running" and store.run(stale.id).state == "preempted"
    # An agent here resumes the lost point and runs the rest; the live one's point is not rerun.
    rerun = _claim(store)
    assert rerun.id == stale.id and rerun.params == stale.params and rerun.host != "node-b"
    while _claim(store) is not None:
        assert store.mark_lost_runs() == []
    points = [tuple(r.params.values()) for r in store.runs() if not r.superseded]
    assert len(points) == 8 and len(set(points)) == 8  # each point once
    _as_of_host(store, fresh.id, "node-b", time.time() - 2.0)  # its heartbeat stopped
    assert store.mark_lost_runs(stale_s=1.0) == [fresh.id]


@pytest.mark.slow
def test_a_lost_run_of_another_host_never_kills_a_process_here(tmp_path):
    """The trial PID of another host's lost run may name a process here (even one that looks
    like that run's trial): it is left alone."""
    import time

    store = _store(tmp_path)
    run = _claim(store)
    lookalike = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"/x/runs/{run.id}"]
    )
    try:
        _as_of_host(store, run.id, "node-b", time.time() - 300, pid=lookalike.pid)
        assert store.mark_lost_runs() == [run.id]
        time.sleep(0.3)
        assert lookalike.poll() is None  # another host's PID: never signalled here
    finally:
        lookalike.kill()
        lookalike.wait()


def test_an_old_store_gains_the_agent_start_column_and_keeps_its_rows(tmp_path):
    """A sweep.db written before hosts, devices and agent start times were recorded opens, its
    runs kept; its running rows are judged as this host's, by PID."""
    import sqlite3

    path = tmp_path / "sweep.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE sweep (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, "
        "state TEXT NOT NULL, params TEXT NOT NULL, search_info TEXT, agent_pid INTEGER, "
        "pid INTEGER, run_dir TEXT, log_path TEXT, exit_code INTEGER, log_tail TEXT, "
        "summary TEXT, stop_requested INTEGER NOT NULL DEFAULT 0, rerun_of TEXT, "
        "superseded INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, started_at REAL, "
        "ended_at REAL, heartbeat_at REAL);"
    )
    db.execute(
        "INSERT INTO runs (id, state, params, agent_pid, created_at) VALUES (?, ?, ?, ?, ?)",
        ("old", "running", '{"a": 1}', os.getpid(), 0.0),
    )
    db.commit()
    db.close()
    store = SweepStore(path)
    (run,) = store.runs()
    assert run.id == "old" and run.host is None and run.agent_started is None
    assert run.agent.alive()  # this process, by PID as then
    assert store.mark_lost_runs() == []


def test_a_preempted_run_goes_to_the_next_agent_first_and_counts_once(tmp_path):
    """A run a cluster's warning stopped is handed out again before any new run, without
    rerun_crashed, and the grid neither repeats nor loses its point."""
    store = _store(tmp_path)
    first = _claim(store)
    store.update(first.id, state="preempted", preemptions=1)
    again = _claim(store)
    assert again.id == first.id and again.params == first.params  # resumed in place
    assert store.run(first.id).preemptions == 1
    while _claim(store) is not None:
        pass
    points = [tuple(r.params.values()) for r in store.runs() if not r.superseded]
    assert len(points) == 8 and len(set(points)) == 8


def test_only_the_agent_that_holds_a_run_records_its_end(tmp_path):
    """An agent taken for lost (stopped or silent too long) while its trial went on: its run
    went to another agent, and its late result does not overwrite that agent's record."""
    store = _store(tmp_path)
    run = _claim(store)
    assert store.update_held(run.id, os.getpid(), exit_code=0)  # it holds the run
    store.update(run.id, agent_pid=os.getpid() + 100_000)  # handed to another agent since
    assert not store.update_held(run.id, os.getpid(), state="crashed", exit_code=-9)
    again = store.run(run.id)
    assert again.state == "running" and again.exit_code == 0


def test_a_claim_itself_gives_back_a_run_whose_agent_is_gone(tmp_path):
    """No separate sweep first: the claim's own transaction finds the run lost with its agent
    and hands it out again, in place, before anything new is proposed."""
    import subprocess
    import sys

    store = _store(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lost = _claim(store, pid=dead.pid)
    again = _claim(store)
    assert again.id == lost.id and again.state == "running" and again.losses == 1
    assert len(store.runs()) == 1
