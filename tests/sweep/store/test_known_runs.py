"""trainer.sweep.store.known_runs: a store's copy of the runs, brought up to date by reading only
what changed, reads what another store wrote: runs added, ended, changed after their end (a rerun
superseding one, a late report), and histories that grew; a claim whose proposal asks for no
history reads none; an older store gains the columns, the counter and the indexes."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest
from sqlalchemy import event, inspect

from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_store


def _claim(store: SweepStore, run_id: str, propose=None, **kwargs):
    return store.claim(
        propose or (lambda runs: ({"i": len(runs)}, None)),
        new_id=lambda: run_id,
        agent_pid=os.getpid(),
        **kwargs,
    )


def _pair(tmp_path, postgres, backend):
    """Two stores of one sweep (two agents), each with its own copy."""
    if backend == "sqlite":
        return open_store(tmp_path / "sweep"), open_store(tmp_path / "sweep")
    url, sweep_id = postgres.url(), "k" + str(time.time_ns())[-9:]
    return open_store(tmp_path / "a", url, sweep_id), open_store(tmp_path / "b", url, sweep_id)


def _backends():
    return [
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.slow),
    ]


@pytest.fixture
def postgres_if(request):
    """The session's server for the postgresql cases (slow), nothing for sqlite."""
    if request.node.callspec.params["backend"] == "postgresql":
        return request.getfixturevalue("postgres")
    return None


@pytest.mark.parametrize("backend", _backends())
def test_a_copy_reads_what_another_store_wrote(tmp_path, postgres_if, backend):
    a, b = _pair(tmp_path, postgres_if, backend)
    first, second = _claim(a, "r1"), _claim(a, "r2")
    assert [r.id for r in b.runs()] == ["r1", "r2"]  # b's copy: every run, once
    a.add_metrics(first.id, [{"val/acc": 0.5}], 0)
    a.update_held(first.id, os.getpid(), state="finished", exit_code=0, summary={"s": 1})
    a.update(second.id, state="crashed", log_tail="boom")
    runs = {r.id: r for r in b.runs()}
    assert runs["r1"].state == "finished" and runs["r1"].summary == {"s": 1}
    assert runs["r1"].history == [{"val/acc": 0.5}]
    assert runs["r2"].state == "crashed"
    # writes to runs that had ended (a late report, a field) reach the copy too
    a.add_metrics(first.id, [{"val/acc": 0.75}], 1)
    a.update(second.id, log_tail="boom, twice")
    runs = {r.id: r for r in b.runs()}
    assert runs["r1"].history == [{"val/acc": 0.5}, {"val/acc": 0.75}]
    assert runs["r2"].log_tail == "boom, twice"
    # a rerun supersedes the crashed run: every copy sees it superseded, and the new run
    third = _claim(a, "r3", rerun_crashed=True)
    assert third.rerun_of == "r2"
    runs = {r.id: r for r in b.runs()}
    assert runs["r2"].superseded and runs["r3"].rerun_of == "r2"
    assert [r.id for r in b.runs()] == [r.id for r in a.runs()] == ["r1", "r2", "r3"]
    a.close()
    b.close()


@pytest.mark.parametrize("backend", _backends())
def test_an_interrupted_run_resumed_in_place_and_finished_is_not_handed_out_again(
    tmp_path, postgres_if, backend
):
    """A crashed run resumed in place (its row written from an ended state) is read anew by
    every copy, the claiming store's own included: once it finishes, nothing reruns it."""
    a, b = _pair(tmp_path, postgres_if, backend)
    run = _claim(a, "r1")
    last = tmp_path / "last.pt"
    last.write_bytes(b"checkpoint")
    summary = {"status": "interrupted", "paths": {"checkpoint": str(last)}}
    a.update_held(run.id, os.getpid(), state="crashed", summary=summary)
    for store in (a, b):
        assert [r.state for r in store.runs()] == ["crashed"]  # both copies hold it ended
    again = _claim(a, "r2", rerun_crashed=True)
    assert again.id == "r1"  # resumed in place
    assert [r.state for r in b.runs()] == ["running"]
    a.update_held(run.id, os.getpid(), state="finished", exit_code=0, summary={"status": "ok"})
    for store in (a, b):
        assert [(r.id, r.state) for r in store.runs()] == [("r1", "finished")]
    assert _claim(a, "r3", propose=lambda runs: None, rerun_crashed=True) is None
    a.close()
    b.close()


@pytest.mark.parametrize("backend", _backends())
def test_a_claim_reads_histories_only_when_its_proposal_asks(tmp_path, postgres_if, backend):
    a, b = _pair(tmp_path, postgres_if, backend)
    for i in range(3):
        run = _claim(a, f"r{i}")
        a.add_metrics(run.id, [{"val/acc": i / 10}], 0)
        a.update_held(run.id, os.getpid(), state="finished", exit_code=0)
    statements: list[str] = []

    def seen(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement)

    event.listen(b.engine.engine, "before_cursor_execute", seen)
    _claim(b, "counted")
    assert statements and not any("metrics" in s for s in statements)
    statements.clear()
    histories = []
    _claim(b, "bayes", lambda runs: histories.extend(r.history for r in runs) or ({"i": 9}, None))
    assert histories[:3] == [[{"val/acc": 0.0}], [{"val/acc": 0.1}], [{"val/acc": 0.2}]]
    assert sum("metrics" in s for s in statements) == 1  # every history, in one read
    a.close()
    b.close()


def test_a_store_of_the_previous_schema_gains_the_counter_and_the_indexes(tmp_path):
    store = open_store(tmp_path / "sweep")
    _claim(store, "old")
    store.close()
    db = sqlite3.connect(tmp_path / "sweep" / "sweep.db")  # as the previous release left it
    for index in ("runs_state", "runs_ticket", "runs_changed"):
        db.execute(f"DROP INDEX {index}")
    db.execute("DROP TABLE revision")
    db.execute("ALTER TABLE runs DROP COLUMN changed")
    db.execute("ALTER TABLE runs DROP COLUMN reports")
    db.execute("UPDATE sweep SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    store = open_store(tmp_path / "sweep")
    with store.reading() as conn:
        found = inspect(conn)
        indexes = {i["name"] for i in found.get_indexes("runs")}
        columns = {c["name"] for c in found.get_columns("runs")}
    assert {"runs_state", "runs_ticket", "runs_changed"} <= indexes
    assert {"changed", "reports"} <= columns and store.get("schema_version") == 3
    store.update("old", state="finished")
    assert [(r.id, r.state) for r in store.runs()] == [("old", "finished")]
    assert _claim(store, "new").id == "new"
    store.close()
