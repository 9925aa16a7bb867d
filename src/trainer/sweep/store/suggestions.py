"""The store's side of a scheduler-driven sweep: the optimizer lease (one process drives the
optimizer; the lease lapses when that process dies or stops renewing it, judged as runs are by
trainer.sweep.store.liveness) and the queue of suggested runs that agents claim exactly once,
both in the sweep's store, changed in its writers' transactions."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection, delete, select, update

from trainer.sweep.store import tables as t
from trainer.sweep.store.database import RunRecord, SweepStore
from trainer.sweep.store.liveness import Holder
from trainer.sweep.store.reconnect import retrying
from trainer.sweep.store.records import Busy

LEASE_S = 30.0  # a holder that has not renewed its lease for this long loses it
LEASE = (
    t.optimizer_lease.c.token,
    t.optimizer_lease.c.pid,
    t.optimizer_lease.c.generation,
    t.optimizer_lease.c.renewed_at,
    t.optimizer_lease.c.host,
    t.optimizer_lease.c.started,
)


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
    """Lease, queue and waiting agents of one sweep's store (its tables: trainer.sweep.store.tables)."""

    def __init__(self, store: SweepStore) -> None:
        self.store = store

    def _read(self, db: Connection | None, read: Any) -> Any:
        """`read(db)`, in a reader's transaction of its own when `db` is None."""
        if db is not None:
            return read(db)
        with self.store.reading() as own:
            return read(own)

    # the lease ---------------------------------------------------------------------------
    @staticmethod
    def _lease(db: Connection) -> Lease | None:
        row = db.execute(select(*LEASE)).first()
        return None if row is None else Lease(*row)

    @retrying
    def lease(self, db: Connection | None = None) -> Lease | None:
        """The current lease (token, pid, generation, renewed_at, host, started), or None."""
        return self._read(db, self._lease)

    @retrying
    def takeable(self, db: Connection | None = None) -> bool:
        """No lease, or its holder is dead (of this host: its process is gone; of another: its
        renewals stopped) or silent for LEASE_S."""
        held = self.lease(db)
        if held is None:
            return True
        now = time.time()
        return not held.holder.alive(LEASE_S, now) or held.holder.silent(LEASE_S, now)

    def hold(self, db: Connection, token: str, pid: int) -> int | None:
        """Inside a transaction: renew our lease, or take a lapsed one (`pid`: the process of
        this host that holds it). The lease's generation (it grows with each new holder), or
        None when another live process holds it."""
        held = self.lease(db)
        now = time.time()
        if held is not None and held.token == token:
            db.execute(update(t.optimizer_lease).values(renewed_at=now))
            return held.generation
        if held is not None and not self.takeable(db):
            return None
        generation = 1 + (held.generation if held else 0)
        holder = Holder.of(pid)
        values = dict(one=1, token=token, pid=pid, generation=generation, renewed_at=now)
        values.update(host=holder.host, started=holder.started)
        t.upsert(db, t.optimizer_lease, values, ("one",))
        return generation

    @retrying
    def release(self, token: str) -> None:
        """Hand our lease back: it lapses now (its generation stays, for the next holder)."""
        with self.store.transaction() as db:
            ours = t.optimizer_lease.c.token == token
            db.execute(update(t.optimizer_lease).where(ours).values(token="", renewed_at=0))

    # the queue ---------------------------------------------------------------------------
    @retrying
    def queued(self, db: Connection | None = None) -> list[Suggestion]:
        s = t.suggestions.c

        def read(db: Connection) -> list[Suggestion]:
            rows = db.execute(select(s.seq, s.params, s.info).order_by(s.seq)).fetchall()
            return [Suggestion(seq, json.loads(p), json.loads(i)) for seq, p, i in rows]

        return self._read(db, read)

    @staticmethod
    def put(db: Connection, params: dict[str, Any], info: dict[str, Any]) -> int:
        values = dict(params=json.dumps(params), info=json.dumps(info), created_at=time.time())
        return int(db.execute(t.suggestions.insert().values(**values)).inserted_primary_key[0])

    def claim(
        self,
        *,
        new_id: Any,
        agent_pid: int,
        rerun_crashed: bool,
        pool: Any = None,
        wrap: Any = None,
    ) -> RunRecord | Busy | None:
        """The next run for an agent, exactly once: a crashed run to rerun (as the store hands
        those out), else the oldest queued suggestion, taken off the queue in the same
        transaction that records the run (its search_info names the suggestion). `wrap`, given
        the popping proposal, returns the one to use (hydra.sweeper.repeats hands out the
        repeats of a configuration before popping the next)."""
        s, w = t.suggestions.c, t.waiting_agents.c
        me = Holder.of(agent_pid)

        def pop_or_wait(_runs: list[RunRecord]) -> tuple[dict, dict] | None:
            db = self.store.claiming
            mine = (w.host == me.host) & (w.pid == me.pid)  # looking again: its heartbeat
            db.execute(update(t.waiting_agents).where(mine).values(heartbeat_at=time.time()))
            row = db.execute(select(s.seq, s.params, s.info).order_by(s.seq).limit(1)).first()
            if row is None:
                return None
            db.execute(delete(t.suggestions).where(s.seq == row[0]))
            return json.loads(row[1]), {**json.loads(row[2]), "suggestion": row[0]}

        propose = pop_or_wait if wrap is None else wrap(pop_or_wait)
        return self.store.claim(
            propose, new_id=new_id, agent_pid=agent_pid, rerun_crashed=rerun_crashed, pool=pool
        )

    # agents waiting for a run --------------------------------------------------------------
    @retrying
    def wait(self, pid: int, waiting: bool) -> None:
        """Say that agent `pid` (of this host) waits for a run (or no longer does)."""
        me, now = Holder.of(pid), time.time()
        w = t.waiting_agents.c
        with self.store.transaction() as db:
            if not waiting:
                db.execute(delete(t.waiting_agents).where((w.host == me.host) & (w.pid == pid)))
                return
            values = dict(host=me.host, pid=pid, started=me.started, since=now, heartbeat_at=now)
            t.upsert(db, t.waiting_agents, values, ("host", "pid"))

    @retrying
    def waiting(self, db: Connection | None = None) -> int:
        """How many live agents wait for a run (of another host: one that looked for a run
        within LEASE_S)."""
        w = t.waiting_agents.c

        def read(db: Connection) -> int:
            rows = db.execute(select(w.host, w.pid, w.started, w.heartbeat_at)).fetchall()
            now = time.time()
            return sum(1 for row in rows if Holder(*row).alive(LEASE_S, now))

        return self._read(db, read)

    # the end of the search -----------------------------------------------------------------
    @staticmethod
    def finish(db: Connection, reason: str) -> None:
        """Record that the optimizer hands out no further run (and why)."""
        t.upsert(db, t.sweep, {"key": "search_over", "value": json.dumps(reason)}, ("key",))

    @staticmethod
    def reopen(db: Connection) -> None:
        """The sweep's definition changed (`extend`): the search is not over, and suggestions
        made for the old space are dropped (the optimizer rebuilt from the new one suggests)."""
        db.execute(delete(t.sweep).where(t.sweep.c.key == "search_over"))
        db.execute(delete(t.suggestions))

    @retrying
    def over(self) -> str | None:
        """Why the search is over with nothing left in the queue, or None while runs remain."""
        reason = self.store.get("search_over")
        if reason is None or self.queued():
            return None
        return str(reason)
