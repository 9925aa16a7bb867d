"""The sweep's lifecycle in its store (W&B's pause, resume, stop, cancel; stop one run): every
verb from every state, on SQLite (fast) and PostgreSQL (slow); a refused verb changes nothing;
a halted sweep hands out no run, no cancelled or stopped run is handed out again, and the
verbs reach a PostgreSQL-kept sweep from a machine without its directory."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_store
from trainer.sweep.store.records import STOP_BY_CANCEL, STOP_BY_ENGINE, STOP_BY_OWNER

CONFIG = {"method": "grid", "parameters": {"i": {"values": [0, 1, 2, 3, 4, 5]}}}
BY = "ada@node1"
STATES = ("running", "paused", "stopped", "cancelled", "finished")
# verb -> the state it leads to from each state (absent: refused)
EXPECTED = {
    "pause": {"running": "paused"},
    "resume": {"paused": "running"},
    "stop": {"running": "stopped", "paused": "stopped"},
    "cancel": {"running": "cancelled", "paused": "cancelled"},
}
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SweepStore(tmp_path / "sweep.db")
    else:
        url = request.getfixturevalue("postgres").url()
        made = open_store(tmp_path / "sweep", url, "st" + uuid.uuid4().hex[:8])
    made.set("config", CONFIG)
    made.set("sweep_id", "s1")
    made.set("state", "running")
    yield made
    made.close()


def _claim(store, rerun_crashed: bool = False):
    return store.claim(
        lambda runs: ({"i": len(runs)}, None),
        new_id=lambda: "r" + uuid.uuid4().hex[:6],
        agent_pid=os.getpid(),
        rerun_crashed=rerun_crashed,
    )


def _put_in(store, state: str) -> None:
    """Bring the sweep to `state` as it gets there: its owner's verb, or its agents' end."""
    if state in ("paused", "stopped", "cancelled"):
        verb = {"paused": "pause", "stopped": "stop", "cancelled": "cancel"}[state]
        store.steer(verb, "s1", "someone@else", now=1.0)
    elif state == "finished":
        store.set("state", "finished")


def _snapshot(store) -> tuple:
    runs = [(r.id, r.state, r.stop_requested) for r in store.runs()]
    return store.get("state"), store.get(steering.STEERED_KEY), runs


def test_the_table_is_w_and_b_s_verbs():
    assert steering.TRANSITIONS == EXPECTED


@pytest.mark.parametrize("verb", steering.VERBS)
@pytest.mark.parametrize("state", STATES)
def test_every_verb_from_every_state(store, state, verb):
    running = _claim(store)
    _put_in(store, state)
    assert store.lifecycle()[0] == state
    after = EXPECTED[verb].get(state)
    if after is None:
        before = _snapshot(store)
        with pytest.raises(steering.SteerError) as err:
            store.steer(verb, "s1", BY)
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
        assert f"{verb} s1" in str(err.value)
        assert _snapshot(store) == before  # nothing in the store changed
        return
    change = store.steer(verb, "s1", BY, now=1000.0)
    assert change == steering.Change(after, verb, BY, 1000.0)
    assert store.lifecycle() == (after, change)
    assert store.get("state") == after
    # every agent of every host reads the same: a fresh connection to the store
    other = SweepStore(storage=store.storage)
    assert other.lifecycle() == (after, change)
    other.close()
    asked = store.run(running.id).stop_requested
    assert asked == (STOP_BY_CANCEL if verb == "cancel" else 0)  # only cancel stops runs


def test_a_halted_sweep_hands_out_no_run_until_resumed(store):
    store.steer("pause", "s1", BY)
    assert _claim(store) is None
    store.steer("resume", "s1", BY)
    assert _claim(store) is not None
    store.steer("stop", "s1", BY)
    assert _claim(store) is None and _claim(store, rerun_crashed=True) is None


def test_cancel_stops_the_running_and_ends_the_waiting_and_none_comes_back(store):
    running, waiting = _claim(store), _claim(store)
    store.update(waiting.id, state="preempted")  # waits to resume from its last.pt
    store.steer("cancel", "s1", BY)
    assert store.run(running.id).stop_requested == STOP_BY_CANCEL
    assert store.run(running.id).state == "running"  # its agent sends SIGTERM at its poll
    assert store.run(waiting.id).state == "cancelled"
    store.update(running.id, state="cancelled")  # as its agent records it
    store.set("state", "running")  # even if something set the sweep running again by hand
    store.set(steering.STEERED_KEY, None)
    assert _claim(store, rerun_crashed=True).id not in (running.id, waiting.id)


def test_stop_runs_asks_the_running_ends_the_waiting_and_the_sweep_goes_on(store):
    running, waiting, other = _claim(store), _claim(store), _claim(store)
    store.update(waiting.id, state="preempted")
    stopped = store.stop_runs([running.id, waiting.id], "s1")
    assert [r.id for r in stopped] == [running.id, waiting.id]
    assert store.run(running.id).stop_requested == STOP_BY_OWNER
    assert store.heartbeat(running.id) == STOP_BY_OWNER  # what the agent's poll reads
    assert store.run(waiting.id).state == "stopped"
    assert store.run(other.id).stop_requested == 0
    assert store.lifecycle()[0] == "running"
    store.update(running.id, state="stopped")
    new = _claim(store, rerun_crashed=True)  # neither is handed out again
    assert new is not None and new.id not in (running.id, waiting.id)


def test_stop_runs_refuses_unknown_and_ended_runs_and_changes_nothing(store):
    running, done = _claim(store), _claim(store)
    store.update(done.id, state="finished")
    before = _snapshot(store)
    with pytest.raises(steering.SteerError) as err:
        store.stop_runs([running.id, running.id[:-1] + "z"], "s1")
    assert f"did you mean {running.id}?" in str(err.value)
    with pytest.raises(steering.SteerError) as err:
        store.stop_runs([running.id, done.id], "s1")
    assert f"{done.id} (finished) already ended" in str(err.value)
    assert _snapshot(store) == before


def test_a_stopped_run_lost_with_its_agent_stays_stopped(store):
    run = _claim(store)
    store.stop_runs([run.id], "s1")
    store.update(run.id, host="node-b", heartbeat_at=time.time() - 3600)  # its agent silent
    assert store.mark_lost_runs() == [run.id]
    assert store.run(run.id).state == "stopped"


def test_hyperband_does_not_overwrite_its_owners_stop(store):
    run = _claim(store)
    store.stop_runs([run.id], "s1")
    store.request_stop([run.id])  # the engine's stop, after the owner's
    assert store.stop_requested(run.id) == STOP_BY_OWNER
    other = _claim(store)
    store.request_stop([other.id])
    assert store.stop_requested(other.id) == STOP_BY_ENGINE


def test_a_sweep_whose_agents_took_their_count_is_not_stopped_by_its_owner(store):
    store.set("state", "stopped")  # `stopped (3/6 runs)`: agents may join it again
    assert store.lifecycle()[0] == "running"
    assert store.steer("pause", "s1", BY).state == "paused"


@pytest.mark.slow
def test_the_verbs_act_on_a_sweep_kept_in_postgresql_from_another_machine(
    postgres, tmp_path, capsys
):
    url, sweep_id = postgres.url(), "pg" + uuid.uuid4().hex[:8]
    store = open_store(tmp_path / "host-a", url, sweep_id)
    store.set("config", CONFIG)
    store.set("sweep_id", sweep_id)
    run = _claim(store)
    elsewhere = ["--root", str(tmp_path / "host-b"), "--storage", url]  # no directory there
    assert sweep_cli(["pause", sweep_id, *elsewhere]) == 0
    assert store.lifecycle()[0] == "paused" and _claim(store) is None
    assert sweep_cli([*elsewhere, "stop", sweep_id, run.id]) == 0
    assert store.stop_requested(run.id) == STOP_BY_OWNER
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        sweep_cli(["resume", sweep_id + "x", *elsewhere])
    assert done.value.code == 2
    assert f"did you mean {sweep_id}?" in capsys.readouterr().err
    assert store.lifecycle()[0] == "paused"
    store.close()
