"""Where a sweep's store lives, without a server: storage URLs (psycopg 3 for postgresql://, the
password never shown), psycopg missing, the network-filesystem warning, a sweep.db written by
the raw-sqlite3 store of earlier releases opening as it is."""

from __future__ import annotations

import json
import os
import sqlite3
import sys

import pytest

from trainer.sweep.store import netfs
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_store, password_env
from trainer.sweep.store.storage import Storage, StorageError, schema_of, shown
from trainer.sweep.store.tables import SCHEMA_VERSION


def test_postgresql_urls_mean_psycopg_3_and_are_shown_without_password():
    where = Storage.server("postgresql://ann:s3cret@db.example:5432/sweeps", "Ab-12")
    assert where.url.drivername == "postgresql+psycopg" and where.url.password == "s3cret"
    assert where.shown == "postgresql+psycopg://ann@db.example:5432/sweeps"
    assert where.schema == "sweep_ab_12" == schema_of("Ab-12")
    assert shown("postgresql+psycopg://ann:x@h/db") == "postgresql+psycopg://ann@h/db"
    assert len(schema_of("x" * 100)) <= 63
    with pytest.raises(StorageError, match="mysql"):
        Storage.server("mysql://u@h/db", "s")


def test_without_psycopg_the_error_names_the_postgres_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StorageError, match=r"pip install 'compiled-trainer\[postgres\]'") as err:
        open_store(tmp_path, "postgresql://ann:s3cret@h/db", "s")
    assert "s3cret" not in str(err.value) and err.value.exit_code == 2


def test_a_sqlite_sweep_on_a_network_filesystem_is_warned_about_once(tmp_path, capsys):
    mounts = [("/", "ext4"), (str(tmp_path), "nfs4"), (str(tmp_path / "local"), "ext4")]
    assert netfs.filesystem(tmp_path / "local" / "sweep", mounts) == "ext4"  # longest prefix
    assert not netfs.warn_if_network(tmp_path / "local" / "sweep", mounts)
    assert netfs.warn_if_network(tmp_path / "sweep", mounts)
    assert netfs.warn_if_network(tmp_path / "sweep", mounts)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "hydra.sweeper.storage=postgresql://" in err


# The tables of the store before SQLAlchemy (sweep.db as the raw-sqlite3 releases wrote it).
RAW_SCHEMA = """
CREATE TABLE sweep (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
    state TEXT NOT NULL, params TEXT NOT NULL, search_info TEXT, agent_pid INTEGER, pid INTEGER,
    run_dir TEXT, log_path TEXT, exit_code INTEGER, log_tail TEXT, summary TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0, rerun_of TEXT,
    superseded INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, started_at REAL,
    ended_at REAL, heartbeat_at REAL, host TEXT, devices TEXT, agent_started REAL);
CREATE TABLE metrics (run_id TEXT NOT NULL, step INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (run_id, step));
CREATE TABLE agent_slots (host TEXT NOT NULL, pid INTEGER NOT NULL, started REAL,
    heartbeat_at REAL NOT NULL, cores TEXT NOT NULL, cpus INTEGER NOT NULL,
    PRIMARY KEY (host, pid));
CREATE TABLE optimizer_lease (one INTEGER PRIMARY KEY CHECK (one = 1), token TEXT NOT NULL,
    pid INTEGER NOT NULL, generation INTEGER NOT NULL, renewed_at REAL NOT NULL, host TEXT,
    started REAL);
CREATE TABLE suggestions (seq INTEGER PRIMARY KEY AUTOINCREMENT, params TEXT NOT NULL,
    info TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE waiting_agents (host TEXT, pid INTEGER NOT NULL, started REAL, since REAL NOT NULL,
    heartbeat_at REAL, PRIMARY KEY (host, pid));
"""


def test_a_sweep_db_of_the_raw_sqlite3_release_opens_and_goes_on(tmp_path):
    db = sqlite3.connect(tmp_path / "sweep.db")
    db.executescript(RAW_SCHEMA)
    db.execute("INSERT INTO sweep VALUES ('sweep_id', ?)", (json.dumps("old"),))
    db.execute(
        "INSERT INTO runs (id, state, params, created_at) VALUES ('r1', 'finished', ?, 0)",
        (json.dumps({"lr": 0.1}),),
    )
    db.execute("INSERT INTO metrics VALUES ('r1', 0, ?)", (json.dumps({"val/acc": 0.5}),))
    db.execute("INSERT INTO suggestions (params, info, created_at) VALUES ('{}', '{}', 0)")
    db.commit()
    db.close()
    store = open_store(tmp_path)
    assert store.get("sweep_id") == "old" and store.get("schema_version") == SCHEMA_VERSION
    (run,) = store.runs()
    assert run.params == {"lr": 0.1} and run.history == [{"val/acc": 0.5}]
    nxt = store.claim(lambda runs: ({"lr": 0.2}, None), new_id=lambda: "r2", agent_pid=os.getpid())
    assert nxt.seq == 2 and [r.id for r in SweepStore(tmp_path / "sweep.db").runs()] == ["r1", "r2"]


def test_a_store_of_a_newer_release_is_refused(tmp_path):
    store = SweepStore(tmp_path / "sweep.db")
    store.set("schema_version", SCHEMA_VERSION + 1)
    store.close()
    with pytest.raises(Exception, match="upgrade compiled-trainer"):
        SweepStore(tmp_path / "sweep.db")


def test_agents_get_the_password_in_their_environment_not_their_argv():
    assert password_env("postgresql://ann:s3cret@h/db") == {"PGPASSWORD": "s3cret"}
    assert password_env("postgresql://ann@h/db") == {} and password_env(None) == {}
