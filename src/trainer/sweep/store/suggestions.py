"""The store's side of a scheduler-driven sweep: the optimizer lease (one process drives the
optimizer; the lease lapses when that process dies or stops renewing it, judged as runs are by
trainer.sweep.agents.liveness) and the queue of suggested runs that agents claim exactly once,
both in sweep.db under `BEGIN IMMEDIATE`."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from trainer.sweep.agents.liveness import Holder
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.records import Busy

LEASE_S = 30.0  # a holder that has not renewed its lease for this long loses it

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS optimizer_lease (one INTEGER PRIMARY KEY CHECK (one = 1), "
    "token TEXT NOT NULL, pid INTEGER NOT NULL, generation INTEGER NOT NULL, "
    "renewed_at REAL NOT NULL, host TEXT, started REAL)",
    "CREATE TABLE IF NOT EXISTS suggestions (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "params TEXT NOT NULL, info TEXT NOT NULL, created_at REAL NOT NULL)",
)
# Agents of any host waiting for a run; host NULL: a row written before hosts were recorded.
_WAITING = (
    "CREATE TABLE IF NOT EXISTS waiting_agents (host TEXT, pid INTEGER NOT NULL, started REAL, "
    "since REAL NOT NULL, heartbeat_at REAL, PRIMARY KEY (host, pid))"
)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _migrate(db: sqlite3.Connection) -> None:
    """Give a store written before holders had hosts and start times their columns (its rows
    are kept: the lease's holder, the agents that wait, judged as this host's by PID as then)."""
    lease = _columns(db, "optimizer_lease")
    for column, kind in (("host", "TEXT"), ("started", "REAL")):
        if column not in lease:
            db.execute(f"ALTER TABLE optimizer_lease ADD COLUMN {column} {kind}")
    waiting = _columns(db, "waiting_agents")
    if waiting and "host" not in waiting:  # keyed by PID alone: rekeyed by (host, PID)
        db.execute("ALTER TABLE waiting_agents RENAME TO waiting_agents_by_pid")
        db.execute(_WAITING)
        db.execute(
            "INSERT INTO waiting_agents (host, pid, since) SELECT NULL, pid, since "
            "FROM waiting_agents_by_pid"
        )
        db.execute("DROP TABLE waiting_agents_by_pid")
    db.execute(_WAITING)


class Lease(NamedTuple):
    """The optimizer lease: its holder's token and process, its generation and last renewal."""

    token: str
    pid: int
    generation: int
    renewed_at: float
    host: str | None
    started: float | None

    @property
    def holder(self) -> Holder:
        return Holder(self.host, self.pid, self.started, self.renewed_at)


@dataclass(frozen=True)
class Suggestion:
    """A run the optimizer suggested that no agent has claimed yet."""

    seq: int
    params: dict[str, Any]
    info: dict[str, Any]


class SuggestionQueue:
    """Lease, queue and waiting agents of one sweep's store."""

    def __init__(self, store: SweepStore) -> None:
        self.store = store
        with store.transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            _migrate(db)

    # the lease ---------------------------------------------------------------------------
    @staticmethod
    def lease(db: sqlite3.Connection) -> Lease | None:
        """The current lease (token, pid, generation, renewed_at, host, started), or None."""
        row = db.execute(
            "SELECT token, pid, generation, renewed_at, host, started FROM optimizer_lease"
        ).fetchone()
        return None if row is None else Lease(*row)

    def takeable(self, db: sqlite3.Connection | None = None) -> bool:
        """No lease, or its holder is dead (of this host: its process is gone; of another: its
        renewals stopped) or silent for LEASE_S."""
        held = self.lease(db or self.store.connection)
        if held is None:
            return True
        now = time.time()
        return not held.holder.alive(LEASE_S, now) or held.holder.silent(LEASE_S, now)

    def hold(self, db: sqlite3.Connection, token: str, pid: int) -> int | None:
        """Inside a transaction: renew our lease, or take a lapsed one (`pid`: the process of
        this host that holds it). The lease's generation (it grows with each new holder), or
        None when another live process holds it."""
        held = self.lease(db)
        now = time.time()
        if held is not None and held[0] == token:
            db.execute("UPDATE optimizer_lease SET renewed_at = ?", (now,))
            return held[2]
        if held is not None and not self.takeable(db):
            return None
        generation = 1 + (held[2] if held else 0)
        holder = Holder.of(pid)
        db.execute(
            "INSERT OR REPLACE INTO optimizer_lease (one, token, pid, generation, renewed_at, "
            "host, started) VALUES (1, ?, ?, ?, ?, ?, ?)",
            (token, pid, generation, now, holder.host, holder.started),
        )
        return generation

    def release(self, token: str) -> None:
        """Hand our lease back: it lapses now (its generation stays, for the next holder)."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE optimizer_lease SET token = '', renewed_at = 0 WHERE token = ?", (token,)
            )

    # the queue ---------------------------------------------------------------------------
    @staticmethod
    def queued(db: sqlite3.Connection) -> list[Suggestion]:
        rows = db.execute("SELECT seq, params, info FROM suggestions ORDER BY seq").fetchall()
        return [Suggestion(seq, json.loads(p), json.loads(i)) for seq, p, i in rows]

    @staticmethod
    def put(db: sqlite3.Connection, params: dict[str, Any], info: dict[str, Any]) -> int:
        cursor = db.execute(
            "INSERT INTO suggestions (params, info, created_at) VALUES (?, ?, ?)",
            (json.dumps(params), json.dumps(info), time.time()),
        )
        return int(cursor.lastrowid)

    def claim(
        self, *, new_id: Any, agent_pid: int, rerun_crashed: bool, pool: Any = None
    ) -> RunRecord | Busy | None:
        """The next run for an agent, exactly once: a crashed run to rerun (as the store hands
        those out), else the oldest queued suggestion, taken off the queue in the same
        transaction that records the run (its search_info names the suggestion)."""
        db = self.store.connection

        def pop(_runs: list[RunRecord]) -> tuple[dict, dict] | None:
            first = db.execute("SELECT seq, params, info FROM suggestions ORDER BY seq LIMIT 1")
            row = first.fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM suggestions WHERE seq = ?", (row[0],))
            return json.loads(row[1]), {**json.loads(row[2]), "suggestion": row[0]}

        def pop_or_wait(runs: list[RunRecord]) -> tuple[dict, dict] | None:
            db.execute(  # looking again is the waiting agent's heartbeat
                "UPDATE waiting_agents SET heartbeat_at = ? WHERE host = ? AND pid = ?",
                (time.time(), me.host, me.pid),
            )
            return pop(runs)

        me = Holder.of(agent_pid)
        return self.store.claim(
            pop_or_wait, new_id=new_id, agent_pid=agent_pid, rerun_crashed=rerun_crashed, pool=pool
        )

    # agents waiting for a run --------------------------------------------------------------
    def wait(self, pid: int, waiting: bool) -> None:
        """Say that agent `pid` (of this host) waits for a run (or no longer does)."""
        me, now = Holder.of(pid), time.time()
        with self.store.transaction() as db:
            if not waiting:
                db.execute("DELETE FROM waiting_agents WHERE host = ? AND pid = ?", (me.host, pid))
                return
            db.execute(
                "INSERT INTO waiting_agents (host, pid, started, since, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (host, pid) DO UPDATE SET "
                "started = excluded.started, heartbeat_at = excluded.heartbeat_at",
                (me.host, pid, me.started, now, now),
            )

    @staticmethod
    def waiting(db: sqlite3.Connection) -> int:
        """How many live agents wait for a run (of another host: one that looked for a run
        within LEASE_S)."""
        rows = db.execute("SELECT host, pid, started, heartbeat_at FROM waiting_agents")
        now = time.time()
        return sum(1 for row in rows.fetchall() if Holder(*row).alive(LEASE_S, now))

    # the end of the search -----------------------------------------------------------------
    @staticmethod
    def finish(db: sqlite3.Connection, reason: str) -> None:
        """Record that the optimizer hands out no further run (and why)."""
        db.execute(
            "INSERT OR REPLACE INTO sweep (key, value) VALUES ('search_over', ?)",
            (json.dumps(reason),),
        )

    def over(self) -> str | None:
        """Why the search is over with nothing left in the queue, or None while runs remain."""
        reason = self.store.get("search_over")
        if reason is None or self.queued(self.store.connection):
            return None
        return str(reason)
