"""The store's side of a scheduler-driven sweep: the optimizer lease (one process drives the
optimizer; the lease lapses when that process dies or stops renewing it) and the queue of
suggested runs that agents claim exactly once, both in sweep.db under `BEGIN IMMEDIATE`."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from trainer.sweep.agents.liveness import pid_alive
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.records import Busy

LEASE_S = 30.0  # a holder that has not renewed its lease for this long loses it

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS optimizer_lease (one INTEGER PRIMARY KEY CHECK (one = 1), "
    "token TEXT NOT NULL, pid INTEGER NOT NULL, generation INTEGER NOT NULL, "
    "renewed_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS suggestions (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "params TEXT NOT NULL, info TEXT NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS waiting_agents (pid INTEGER PRIMARY KEY, since REAL NOT NULL)",
)


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

    # the lease ---------------------------------------------------------------------------
    @staticmethod
    def lease(db: sqlite3.Connection) -> tuple[str, int, int, float] | None:
        """(token, pid, generation, renewed_at) of the current lease, or None."""
        return db.execute(
            "SELECT token, pid, generation, renewed_at FROM optimizer_lease"
        ).fetchone()

    def takeable(self, db: sqlite3.Connection | None = None) -> bool:
        """No lease, or its holder is dead or silent for LEASE_S."""
        held = self.lease(db or self.store.connection)
        return held is None or not pid_alive(held[1]) or time.time() - held[3] > LEASE_S

    def hold(self, db: sqlite3.Connection, token: str, pid: int) -> int | None:
        """Inside a transaction: renew our lease, or take a lapsed one. The lease's generation
        (it grows with each new holder), or None when another live process holds it."""
        held = self.lease(db)
        now = time.time()
        if held is not None and held[0] == token:
            db.execute("UPDATE optimizer_lease SET renewed_at = ?", (now,))
            return held[2]
        if held is not None and not self.takeable(db):
            return None
        generation = 1 + (held[2] if held else 0)
        db.execute(
            "INSERT OR REPLACE INTO optimizer_lease (one, token, pid, generation, renewed_at) "
            "VALUES (1, ?, ?, ?, ?)",
            (token, pid, generation, now),
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

        return self.store.claim(
            pop, new_id=new_id, agent_pid=agent_pid, rerun_crashed=rerun_crashed, pool=pool
        )

    # agents waiting for a run --------------------------------------------------------------
    def wait(self, pid: int, waiting: bool) -> None:
        """Say that agent `pid` waits for a run (or no longer does)."""
        with self.store.transaction() as db:
            if waiting:
                db.execute(
                    "INSERT OR IGNORE INTO waiting_agents (pid, since) VALUES (?, ?)",
                    (pid, time.time()),
                )
            else:
                db.execute("DELETE FROM waiting_agents WHERE pid = ?", (pid,))

    @staticmethod
    def waiting(db: sqlite3.Connection) -> int:
        """How many live agents wait for a run."""
        pids = [row[0] for row in db.execute("SELECT pid FROM waiting_agents")]
        return sum(1 for pid in pids if pid_alive(pid))

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
