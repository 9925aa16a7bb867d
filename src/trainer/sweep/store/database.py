"""The local sweep store: one SQLite file per sweep holding its config, runs, parameters,
states, per-epoch metric history, exit codes and log paths, and the slot ledger: the devices
each running run holds (its row) and the cores each live agent holds (`agent_slots`), both
judged alive by one liveness (trainer.sweep.agents.liveness: host, PID, start time, heartbeat).
Writers take `BEGIN IMMEDIATE` so several agent processes, of one machine or several sharing
the sweep directory, never hand out the same run or the same slot."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.sweep.agents.liveness import STALE_S, Holder, kill_orphan
from trainer.sweep.store.records import BUSY, Busy, CpuSlot, RunRecord, to_json

if TYPE_CHECKING:
    from trainer.sweep.agents.gpu_slots import DevicePool

TERMINAL = ("finished", "failed", "crashed", "stopped", "pruned")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    state TEXT NOT NULL,
    params TEXT NOT NULL,
    search_info TEXT,
    agent_pid INTEGER,
    pid INTEGER,
    run_dir TEXT,
    log_path TEXT,
    exit_code INTEGER,
    log_tail TEXT,
    summary TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    rerun_of TEXT,
    superseded INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    heartbeat_at REAL,
    host TEXT,
    devices TEXT,
    agent_started REAL
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS agent_slots (
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL,
    heartbeat_at REAL NOT NULL,
    cores TEXT NOT NULL,
    cpus INTEGER NOT NULL,
    PRIMARY KEY (host, pid)
);
"""
# Columns added to `runs` since the first sweep.db: an older store gains them when it opens.
_ADDED = {"host": "TEXT", "devices": "TEXT", "agent_started": "REAL"}


class SweepStore:
    """The SQLite store of one sweep (`<sweep dir>/sweep.db`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        with self.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self._db.execute(stmt)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            for column, kind in _ADDED.items():  # a sweep.db written before they existed
                if column not in columns:
                    self._db.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self._db.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's connection, for tables kept beside `runs` (trainer.sweep.store.suggestions)."""
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An exclusive-for-writers transaction (BEGIN IMMEDIATE)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # sweep-level keys -------------------------------------------------------------------
    def set(self, key: str, value: Any, db: sqlite3.Connection | None = None) -> None:
        """Set a sweep key (inside the transaction `db` when given, else in its own)."""
        if db is None:
            with self.transaction() as db:
                return self.set(key, value, db)
        db.execute(
            "INSERT OR REPLACE INTO sweep (key, value) VALUES (?, ?)", (key, json.dumps(value))
        )
        return None

    def get(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM sweep WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    @property
    def config(self) -> dict[str, Any]:
        return self.get("config")

    # runs ------------------------------------------------------------------------------------
    def _rows(self, db: sqlite3.Connection, where: str = "", args: tuple = ()) -> list[RunRecord]:
        db.row_factory = sqlite3.Row
        try:
            rows = db.execute(f"SELECT * FROM runs {where} ORDER BY seq", args).fetchall()
            ids = [r["id"] for r in rows]
            query, query_args = "SELECT run_id, data FROM metrics", ()
            if where:  # only the selected runs' histories
                query += f" WHERE run_id IN ({', '.join('?' * len(ids))})"
                query_args = tuple(ids)
            hist: dict[str, list[dict]] = {}
            for r in db.execute(f"{query} ORDER BY run_id, step", query_args) if ids else ():
                hist.setdefault(r["run_id"], []).append(json.loads(r["data"]))
        finally:
            db.row_factory = None
        out = []
        for r in rows:
            d = dict(r)
            for key in ("params", "search_info", "summary", "devices"):
                d[key] = None if d[key] is None else json.loads(d[key])
            d["stop_requested"] = bool(d["stop_requested"])
            d["superseded"] = bool(d["superseded"])
            out.append(RunRecord(**d, history=hist.get(d["id"], [])))
        return out

    def runs(self) -> list[RunRecord]:
        return self._rows(self._db)

    def run(self, run_id: str) -> RunRecord:
        found = self._rows(self._db, "WHERE id = ?", (run_id,))
        if not found:
            raise KeyError(f"no run {run_id!r} in sweep store {self.path}")
        return found[0]

    def stop_requested(self, run_id: str) -> bool:
        """Whether the run is asked to stop (one column, for the agent's poll)."""
        row = self._db.execute("SELECT stop_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id!r} in sweep store {self.path}")
        return bool(row[0])

    def claim(
        self,
        propose: Callable[[list[RunRecord]], tuple[dict, dict | None] | None],
        *,
        new_id: Callable[[], str],
        agent_pid: int,
        rerun_crashed: bool = False,
        pool: DevicePool | None = None,
    ) -> RunRecord | None | Busy:
        """Hand out the next run exactly once: a crashed run to rerun (an interrupted one, with
        its checkpoint, resumes in place: same id, run dir and history), else what `propose`
        suggests given the runs so far (None: the sweep has nothing more to run). With a device
        `pool`, the run also gets free devices of this machine, or nothing is handed out while
        none is free (BUSY)."""
        agent = Holder.of(agent_pid)  # a process of this host: its start time is read here
        with self.transaction() as db:
            runs = self._rows(db)
            self._beat(db, agent, time.time())  # its CPU slot, if it holds one, stays its own
            if pool is not None and not pool.available(runs):
                return BUSY
            crashed = self._crashed_to_rerun(runs) if rerun_crashed else None
            if crashed is not None and crashed.resumable:
                devices = pool.choose(runs, crashed.params) if pool is not None else None
                db.execute(
                    "UPDATE runs SET state = 'running', agent_pid = ?, agent_started = ?, pid = "
                    "NULL, exit_code = NULL, ended_at = NULL, log_tail = NULL, heartbeat_at = ?, "
                    "host = ?, devices = ? WHERE id = ?",
                    (
                        agent_pid,
                        agent.started,
                        time.time(),
                        agent.host,
                        to_json(devices),
                        crashed.id,
                    ),
                )
                return self._rows(db, "WHERE id = ?", (crashed.id,))[0]
            if crashed is not None:
                db.execute("UPDATE runs SET superseded = 1 WHERE id = ?", (crashed.id,))
                params, info = crashed.params, None
            else:
                proposal = propose([r for r in runs if not r.superseded])
                if proposal is None:
                    return None
                params, info = proposal
            devices = pool.choose(runs, params) if pool is not None else None
            run_id = new_id()
            rerun_of = crashed.id if crashed is not None else None
            self._insert(db, run_id, params, info, agent, rerun_of, devices)
        return self.run(run_id)

    @staticmethod
    def _insert(
        db: sqlite3.Connection,
        run_id: str,
        params: dict,
        info: dict | None,
        agent: Holder,
        rerun_of: str | None,
        devices: list[str] | None,
    ) -> None:
        """A new running run of `agent`, holding `devices`."""
        now = time.time()
        db.execute(
            "INSERT INTO runs (id, state, params, search_info, agent_pid, rerun_of, created_at, "
            "started_at, heartbeat_at, host, devices, agent_started) "
            "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                json.dumps(params),
                to_json(info),
                agent.pid,
                rerun_of,
                now,
                now,
                now,
                agent.host,
                to_json(devices),
                agent.started,
            ),
        )

    @staticmethod
    def _crashed_to_rerun(runs: list[RunRecord]) -> RunRecord | None:
        """The first crashed run not yet rerun: resumable ones are taken first."""
        crashed = [r for r in runs if r.state == "crashed" and not r.superseded]
        resumable = [r for r in crashed if r.resumable]
        return (resumable or crashed or [None])[0]

    def update(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        values = [
            json.dumps(v) if k in ("summary", "search_info", "devices") else v
            for k, v in fields.items()
        ]
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*values, run_id))

    def add_metrics(self, run_id: str, rows: list[dict[str, Any]], first_step: int) -> None:
        """Append per-epoch metric rows (step = epoch index) and refresh the heartbeat."""
        with self.transaction() as db:
            for i, row in enumerate(rows):
                db.execute(
                    "INSERT OR REPLACE INTO metrics (run_id, step, data) VALUES (?, ?, ?)",
                    (run_id, first_step + i, json.dumps(row)),
                )
            db.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time(), run_id))

    def heartbeat(self, run_id: str) -> None:
        """The run's agent lives: the run's heartbeat and its agent's CPU slot's."""
        now = time.time()
        with self.transaction() as db:
            db.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (now, run_id))
            db.execute(
                "UPDATE agent_slots SET heartbeat_at = ? WHERE (host, pid) IN "
                "(SELECT host, agent_pid FROM runs WHERE id = ?)",
                (now, run_id),
            )

    def request_stop(self, run_ids: list[str]) -> None:
        with self.transaction() as db:
            for run_id in run_ids:
                db.execute(
                    "UPDATE runs SET stop_requested = 1 WHERE id = ? AND state = 'running'",
                    (run_id,),
                )

    def mark_lost_runs(self, stale_s: float = STALE_S) -> list[str]:
        """Mark running runs whose agent is gone crashed: an agent of this host whose process
        no longer runs (or that was silent for `stale_s`); an agent of another host whose
        heartbeat is older than `stale_s` (its PID means nothing here). A lost run's trial still
        running on this host is ended."""
        lost = []
        now = time.time()
        with self.transaction() as db:
            for r in self._rows(db, "WHERE state = 'running'"):
                agent = r.agent
                if agent.is_me or (agent.alive(stale_s, now) and not agent.silent(stale_s, now)):
                    continue
                db.execute(
                    "UPDATE runs SET state = 'crashed', ended_at = ?, log_tail = ? WHERE id = ?",
                    (now, "agent process lost while the run was going", r.id),
                )
                lost.append(r.id)
                kill_orphan(r.pid, r.id, r.host)
        return lost

    # the slot ledger: the cores each live agent holds ------------------------------------------
    def cpu_slots(self, db: sqlite3.Connection, stale_s: float = STALE_S) -> list[CpuSlot]:
        """Inside a transaction: the CPU slots of the sweep's live agents, every host's (a
        dead agent's row is deleted: its cores are free again)."""
        now, live = time.time(), []
        rows = db.execute("SELECT host, pid, started, heartbeat_at, cores, cpus FROM agent_slots")
        for host, pid, started, beat, cores, cpus in rows.fetchall():
            holder = Holder(host, pid, started, beat)
            if holder.alive(stale_s, now):
                live.append(CpuSlot(holder, tuple(json.loads(cores)), cpus))
            else:
                db.execute("DELETE FROM agent_slots WHERE host = ? AND pid = ?", (host, pid))
        return live

    @staticmethod
    def hold_cpu_slot(
        db: sqlite3.Connection, agent: Holder, cores: tuple[int, ...] | None, cpus: int = 0
    ) -> None:
        """Inside a transaction: record `agent`'s cores (None: it holds none now)."""
        db.execute("DELETE FROM agent_slots WHERE host = ? AND pid = ?", (agent.host, agent.pid))
        if cores is not None:
            db.execute(
                "INSERT INTO agent_slots (host, pid, started, heartbeat_at, cores, cpus) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (agent.host, agent.pid, agent.started, time.time(), json.dumps(cores), cpus),
            )

    @staticmethod
    def _beat(db: sqlite3.Connection, agent: Holder, now: float) -> None:
        db.execute(
            "UPDATE agent_slots SET heartbeat_at = ? WHERE host = ? AND pid = ?",
            (now, agent.host, agent.pid),
        )
