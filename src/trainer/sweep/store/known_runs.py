"""A store's own copy of its sweep's runs, brought up to date by reading only what may have
changed, so that a claim (and hyperband's look at every run) costs the same with a thousand or a
hundred thousand ended runs behind it.

A run that has ended (records.TERMINAL) no longer changes, but for the few writes that touch an
ended row (a rerun marks a crashed run superseded; a silent agent taken for lost still reports):
each of those also raises the sweep's change counter (`revision.n`) in its transaction and marks
the row with it (`runs.changed`). A copy is brought up to date (`KnownRuns.sync`) by reading, in
the reader's transaction:

- every run that has not ended (`state IN ('running', 'preempted')`, indexed);
- the runs added since (`seq` above the highest seen: runs are inserted under the sweep's
  writer lock, so their seq grows in commit order);
- the runs the copy held as not ended that the first read no longer finds so (they ended);
- the ended runs marked since the counter's value at the last sync (`changed`, indexed).

The counter is read first: a mark at or below it committed before, and the reads see it; a
later one is read again next time. Histories (the metrics table) are read only when a record's
`history` is first asked for, for every record that lacks it at once, and kept while the run's
report count (`runs.reports`, raised by every report) is unchanged."""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import ColumnElement, Connection, Integer, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY

from trainer.sweep.store import tables as t
from trainer.sweep.store.records import TERMINAL, RunRecord

JSON_COLUMNS = ("params", "search_info", "summary", "devices")
OPEN_STATES = ("running", "preempted")  # the states of a run that has not ended
HISTORY_CHUNK = 500  # run ids per read of the metrics table
WHOLE_TABLE = 5_000  # more records than this lack a history: read the whole metrics table
COLUMNS = tuple(c.name for c in t.runs.columns)  # a row of select(t.runs), in order
SEQ, REPORTS = COLUMNS.index("seq"), COLUMNS.index("reports")
_PARSED = tuple(
    (i, name, name in JSON_COLUMNS)
    for i, name in enumerate(COLUMNS)
    if name not in ("changed", "reports")
)


def _seq(row: tuple) -> int:
    return row[SEQ]


def _among(db: Connection, seqs: list[int]) -> ColumnElement[bool]:
    """`runs.seq IN seqs`; on PostgreSQL as `= ANY(array)`, one parameter whatever their
    number, so that the statement's text stays the same from sync to sync (compiled and
    prepared once, not rendered anew with each count of runs)."""
    if db.dialect.name == "postgresql":
        return t.runs.c.seq == any_(bindparam("open_seqs", seqs, type_=ARRAY(Integer)))
    return t.runs.c.seq.in_(seqs)


class StoredRun(RunRecord):
    """A run record as a store read it: its history is read from the metrics table when first
    asked for (with the histories of every record of its copy that lacks one)."""

    _history: list[dict[str, Any]] | None = None
    _known: KnownRuns | None = None
    _reports: int = 0
    _raw: tuple | None = None  # the row it was read from

    @property  # type: ignore[override]
    def history(self) -> list[dict[str, Any]]:
        if self._history is None:
            if self._known is None:
                return []
            self._known.fill_histories()
        return self._history if self._history is not None else []

    @history.setter
    def history(self, value: list[dict[str, Any]]) -> None:
        self._history = value


def record(row: tuple, known: KnownRuns | None = None, old: StoredRun | None = None) -> StoredRun:
    """The record of one row of `select(t.runs)`, its history not read yet; the JSON values of
    `old` (the same run's record) are reused where the row holds the same text."""
    d: dict[str, Any] = {}
    was = old._raw if old is not None else None
    for i, name, parsed in _PARSED:
        value = row[i]
        if parsed and value is not None:
            same = was is not None and was[i] == value
            value = getattr(old, name) if same else json.loads(value)
        d[name] = value
    d["stop_requested"] = int(d["stop_requested"])
    d["superseded"] = bool(d["superseded"])
    run = StoredRun.__new__(StoredRun)  # the fields as RunRecord's __init__ sets them
    run.__dict__.update(d)
    run._history, run._known, run._reports, run._raw = None, known, int(row[REPORTS] or 0), row
    return run


def read_histories(db: Connection, runs: list[StoredRun]) -> None:
    """Give each of `runs` its history, in few reads of the metrics table."""
    if not runs:
        return
    hist: dict[str, list[dict]] = {r.id: [] for r in runs}
    m = t.metrics.c
    query = select(m.run_id, m.data).order_by(m.run_id, m.step)
    if len(runs) > WHOLE_TABLE:
        chunks: Iterable = [db.execute(query)]
    else:
        ids = list(hist)
        chunks = (
            db.execute(query.where(m.run_id.in_(ids[i : i + HISTORY_CHUNK])))
            for i in range(0, len(ids), HISTORY_CHUNK)
        )
    for rows in chunks:
        for run_id, data in rows:
            if run_id in hist:
                hist[run_id].append(json.loads(data))
    for run in runs:
        run._history = hist[run.id]


class KnownRuns:
    """One store's copy of the sweep's runs (see the module's doc), in seq order. Used under
    `lock` (a store may serve several threads); `reading` opens a reader's transaction for a
    history asked for outside of a sync's."""

    def __init__(self, reading: Callable[[], AbstractContextManager[Connection]]) -> None:
        self.lock = threading.RLock()
        self._reading = reading
        self._db: Connection | None = None  # the transaction of the sync in progress, if any
        self.reset()

    def reset(self) -> None:
        """Forget every run (the next sync reads them all)."""
        self.all: list[StoredRun] = []
        self._at: dict[int, int] = {}  # seq -> index in `all`
        self._live: list[StoredRun] | None = []  # not superseded; None: to be rebuilt
        self._live_at: dict[int, int] = {}
        self.open: dict[int, StoredRun] = {}  # the runs that have not ended, by seq
        self.crashed: dict[int, StoredRun] = {}  # crashed and not superseded, by seq
        self._lacking: dict[int, StoredRun] = {}  # the records without their history, by seq
        self.max_seq = 0
        self.revision: int | None = None  # the change counter at the last sync; None: never

    def copy_from(self, other: KnownRuns) -> None:
        """Start from `other`'s copy of the same sweep (its records shared, never changed in
        place): a second store of one process need not read every run and history again."""
        with other.lock, self.lock:
            self.all, self._at = list(other.all), dict(other._at)
            self._live = None if other._live is None else list(other._live)
            self._live_at = dict(other._live_at)
            self.open, self.crashed = dict(other.open), dict(other.crashed)
            self._lacking = dict(other._lacking)
            self.max_seq, self.revision = other.max_seq, other.revision

    # reading ------------------------------------------------------------------------------
    def sync(self, db: Connection) -> None:
        """Bring the copy up to date inside the transaction `db` (see the module's doc)."""
        r = t.runs.c
        if self.revision is None:  # the first: every run
            self.revision = int(db.execute(select(t.revision.c.n)).scalar() or 0)
            for row in db.execute(select(t.runs).order_by(r.seq)):
                self._put(row)
            return
        # one statement (one snapshot); the counter as it was then, beside each row
        counter = select(t.revision.c.n).scalar_subquery()
        changed = r.state.in_(OPEN_STATES) | (r.seq > self.max_seq) | (r.changed > self.revision)
        if self.open:  # and the runs that had not ended: some may have ended since
            changed |= _among(db, list(self.open))
        revision = None
        # sorted here: an ORDER BY would make SQLite scan the table in seq order
        for row in sorted(db.execute(select(t.runs, counter).where(changed)), key=_seq):
            self._put(row[:-1])
            revision = row[-1]
        if revision is not None:  # no row: nothing changed, the counter neither
            self.revision = int(revision)

    def fill_histories(self) -> None:
        """Read the history of every record that lacks one (in the sync's transaction while
        one is open, else in a reader's)."""
        with self.lock:
            lacking = [run for run in self._lacking.values() if run._history is None]
            if self._db is not None:
                read_histories(self._db, lacking)
            else:
                with self._reading() as db:
                    read_histories(db, lacking)
            self._lacking = {}

    def using(self, db: Connection) -> AbstractContextManager[None]:
        """While in it: histories asked for are read in `db` (a claim's transaction)."""
        return _Using(self, db)

    # views --------------------------------------------------------------------------------
    def live(self) -> list[StoredRun]:
        """The runs not superseded by a rerun, in seq order (a new list)."""
        if self._live is None:
            self._live = [run for run in self.all if not run.superseded]
            self._live_at = {run.seq: i for i, run in enumerate(self._live)}
        return list(self._live)

    def to_rerun(self) -> list[StoredRun]:
        """The runs a claim may hand out again: preempted, or crashed and not superseded, in
        seq order."""
        runs = [run for run in self.open.values() if run.state == "preempted"]
        runs += [run for run in self.crashed.values()]
        return sorted((run for run in runs if not run.superseded), key=lambda run: run.seq)

    def running(self) -> list[StoredRun]:
        return sorted(
            (run for run in self.open.values() if run.state == "running"),
            key=lambda run: run.seq,
        )

    # keeping ------------------------------------------------------------------------------
    def _put(self, row: tuple) -> None:
        seq = row[SEQ]
        at = self._at.get(seq)
        old = self.all[at] if at is not None else None
        if old is not None and old._raw == tuple(row):
            return  # unchanged since the last read
        run = record(tuple(row), self, old)
        if old is not None and old._history is not None and old._reports == run._reports:
            run._history = old._history  # no report since: the history read stands
            self._lacking.pop(seq, None)
        else:
            self._lacking[seq] = run
        if at is not None:
            self.all[at] = run
        elif seq > self.max_seq or not self.all:
            self._at[seq] = len(self.all)
            self.all.append(run)
        else:  # a run below the highest seq seen, new to the copy: keep seq order
            where = bisect.bisect([r.seq for r in self.all], seq)
            self.all.insert(where, run)
            self._at = {r.seq: i for i, r in enumerate(self.all)}
            self._live = None
        self.max_seq = max(self.max_seq, seq)
        self._keep_live(old, run)
        if run.state in TERMINAL:
            self.open.pop(seq, None)
        else:
            self.open[seq] = run
        if run.state == "crashed" and not run.superseded:
            self.crashed[seq] = run
        else:
            self.crashed.pop(seq, None)

    def _keep_live(self, old: StoredRun | None, run: StoredRun) -> None:
        live = self._live
        if live is None:
            return
        if old is not None and old.superseded != run.superseded:
            self._live = None  # rare (a rerun): rebuilt when next asked for
        elif run.superseded:
            return
        elif old is not None:
            live[self._live_at[run.seq]] = run
        elif not live or run.seq > live[-1].seq:
            self._live_at[run.seq] = len(live)
            live.append(run)
        else:
            self._live = None


class _Using(AbstractContextManager[None]):
    def __init__(self, known: KnownRuns, db: Connection) -> None:
        self.known, self.db = known, db

    def __enter__(self) -> None:
        self.known._db = self.db

    def __exit__(self, *_exc: Any) -> None:
        self.known._db = None
