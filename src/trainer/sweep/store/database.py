"""The local sweep store: one database per sweep holding its config, runs, parameters, states,
per-epoch metric history, exit codes and log paths, and the slot ledger: the devices each
running run holds (its row) and the cores each live agent holds (`agent_slots`), both judged
alive by one liveness (trainer.sweep.store.liveness: host, PID, start time, heartbeat).

The database is the embedded SQLite file `<sweep dir>/sweep.db`, or a PostgreSQL server
(trainer.sweep.store.storage), through SQLAlchemy Core. Writers serialize per sweep, so several
agent processes, of one machine or many, never hand out the same run or the same slot: on SQLite
with `BEGIN IMMEDIATE`, on PostgreSQL with the sweep's transaction-level advisory lock
(`pg_advisory_xact_lock`), taken first in every writer's transaction."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Row,
    Text,
    bindparam,
    delete,
    func,
    inspect,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.schema import CreateSchema

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.errors import TrainerError
from trainer.sweep.store import steering
from trainer.sweep.store import tables as t
from trainer.sweep.store.known_runs import JSON_COLUMNS, KnownRuns, read_histories, record
from trainer.sweep.store.liveness import STALE_S, Holder, kill_orphan, this_host
from trainer.sweep.store.reconnect import retrying
from trainer.sweep.store.records import (
    BUSY,
    STOP_BY_CANCEL,
    STOP_BY_ENGINE,
    STOP_BY_OWNER,
    STOPPED_AS,
    TERMINAL,
    Busy,
    CpuSlot,
    RunRecord,
    to_json,
)
from trainer.sweep.store.storage import READ, Storage, check, make_engine
from trainer.sweep.store.upgrade import add_missing_columns, add_missing_indexes


class DeviceChooser(Protocol):
    """What the store asks an agent's devices while it hands out a run (the agents' `gpu_slots.
    DevicePool`): whether one is free for a trial now, and which to give it."""

    def available(self, runs: list[RunRecord]) -> bool: ...

    def choose(self, runs: list[RunRecord], params: dict[str, Any]) -> list[str] | None: ...


__all__ = ["TERMINAL", "Claim", "RunRecord", "SweepStore"]
UNSET = ("seq", "history", "summary", "stop_requested", "superseded")  # a new run: defaults
_r, _s = t.runs.c, t.agent_slots.c
# a run that has not ended (its text fixed, not expanded per call: one statement to prepare)
_GOING = _r.state.not_in([literal(state) for state in TERMINAL])
_STOP_FLAG = select(_r.stop_requested).where(_r.id == bindparam("run_id"))


def _beat_statement() -> Any:
    """PostgreSQL's heartbeat of a run that has not ended, in one statement: the run's and its
    agent's CPU slot's (`now`, `run_id`); the run's stop flag, or no row."""
    now = bindparam("now")
    going = (_r.id == bindparam("run_id")) & _GOING
    run = update(t.runs).where(going).values(heartbeat_at=now)
    run = run.returning(_r.stop_requested, _r.host, _r.agent_pid).cte("beat")
    mine = (_s.host == run.c.host) & (_s.pid == run.c.agent_pid)
    slot = update(t.agent_slots).where(mine).values(heartbeat_at=now).cte("slot")
    return select(run.c.stop_requested).add_cte(slot)


def _report_statement() -> Any:
    """PostgreSQL's report of a run that has not ended, in one statement: its metric rows
    (`steps`, `data`: arrays), its heartbeat (`now`) and report count raised; the steps
    written, none when the run has ended (or there is none)."""
    going = (_r.id == bindparam("run_id")) & _GOING
    beat = dict(heartbeat_at=bindparam("now"), reports=_r.reports + 1)
    run = update(t.runs).where(going).values(**beat).returning(_r.id).cte("beat")
    steps = bindparam("steps", type_=ARRAY(Integer))
    rows = func.unnest(steps, bindparam("data", type_=ARRAY(Text)))
    rows = rows.table_valued("step", "data").render_derived()
    written = select(run.c.id, rows.c.step, rows.c.data).select_from(run.join(rows, true()))
    insert = postgresql.insert(t.metrics).from_select(["run_id", "step", "data"], written)
    keys = ["run_id", "step"]
    insert = insert.on_conflict_do_update(index_elements=keys, set_={"data": insert.excluded.data})
    return insert.returning(t.metrics.c.step)


_BEAT, _REPORT = _beat_statement(), _report_statement()


@dataclass(frozen=True)
class Claim:
    """One claim of an agent, the same for every try of it (its `ticket`)."""

    ticket: str
    propose: Callable[[list[RunRecord]], tuple[dict, dict | None] | None]
    new_id: Callable[[], str]
    agent: Holder
    pool: DeviceChooser | None
    rerun_crashed: bool
    tries: list[int] = field(default_factory=list)  # one entry per try begun


def _lost(run: RunRecord, limit: int, stale_s: float) -> dict[str, Any]:
    """How a run lost with its agent is recorded: preempted (handed out again, resumed from its
    last.pt) while it has losses left, else crashed with the reason."""
    agent = run.agent
    how = (
        f"its agent (pid {agent.pid}) is gone"
        if agent.here
        else f"its agent on {agent.host} was silent for over {stale_s:g} s"
    )
    losses = run.losses + 1
    if losses <= limit:
        tail = f"lost: {how}; handed out again to resume from its last.pt (loss {losses} of "
        return dict(state="preempted", losses=losses, log_tail=f"{tail}max_retries={limit})")
    tail = (
        f"lost: {how}, {losses} times (more than max_retries={limit}); not handed out again. "
        "Rerun it with hydra.sweeper.rerun_crashed=true (or python -m trainer.agent ID "
        "--rerun-crashed) once its cause is fixed"
    )
    return dict(state="crashed", losses=losses, log_tail=tail)


class SweepStore:
    """The store of one sweep: `<sweep dir>/sweep.db` (`path`), or the sweep's schema in the
    PostgreSQL database of `storage` (trainer.sweep.store.opening.open_store picks)."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        storage: Storage | None = None,
        read_only: bool = False,
    ) -> None:
        """`read_only`: a reader (the dashboard) that never creates, upgrades or writes the
        store, through an engine that cannot write (storage.make_engine)."""
        self.storage = storage if storage is not None else Storage.sqlite(path)
        self.path = Path(path) if path is not None else None
        self.where = str(self.path) if self.path is not None else self.storage.shown
        self.claiming: Connection | None = None  # the claim transaction in progress, if any
        self.known = KnownRuns(self.reading)  # its copy of the sweep's runs (known_runs)
        self.engine = make_engine(self.storage, read_only=read_only)
        check(self.engine, self.storage)  # an unreachable server: a clear error now
        if read_only:
            self._check_readable()
        else:
            self._create()

    @retrying
    def _check_readable(self) -> None:
        """A reader's check: the store holds a sweep with this release's tables and columns
        (an older store gains them when a writer opens it, e.g. `trainer.sweep show`)."""
        schema, read = self.storage.schema, (t.sweep, t.runs, t.metrics)
        with self.reading() as db:
            found = inspect(db)
            tables = set(found.get_table_names(schema=schema))
            if not all(table.name in tables for table in read):
                raise TrainerError(f"{self.where} holds no sweep store (no runs or metrics table)")
            lacking = []
            for table in read:
                have = {c["name"] for c in found.get_columns(table.name, schema=schema)}
                lacking += [f"{table.name}.{c.name}" for c in table.columns if c.name not in have]
            version = self.get(t.VERSION_KEY, db=db)
        if lacking or (version is not None and version > t.SCHEMA_VERSION):
            raise TrainerError(
                f"the sweep store {self.where} has schema version {version} (this release reads "
                f"{t.SCHEMA_VERSION}; missing: {', '.join(lacking) or 'nothing'}): open an older "
                "store once with python -m trainer.sweep show, which upgrades it, or read a newer "
                "one with the release that wrote it."
            )

    @retrying
    def _create(self) -> None:
        """Create the tables (an older sweep.db gains the columns added since) and record the
        schema version; a store written by a newer release is refused."""
        with self.transaction() as db:
            if self.storage.schema is not None:
                db.execute(CreateSchema(self.storage.schema, if_not_exists=True))
            if self.storage.is_sqlite:
                t.migrate_sqlite(db)
            add_missing_columns(db, self.storage.schema)  # columns added since it was made
            t.metadata.create_all(db)
            add_missing_indexes(db)  # indexes added since it was made
            dialect = postgresql if db.dialect.name == "postgresql" else sqlite
            first = dialect.insert(t.revision).values(one=1, n=0)
            db.execute(first.on_conflict_do_nothing(index_elements=["one"]))
            row = db.execute(select(t.sweep.c.value).where(t.sweep.c.key == t.VERSION_KEY))
            found = row.scalar()
            if found is not None and json.loads(found) > t.SCHEMA_VERSION:
                raise TrainerError(
                    f"the sweep store {self.where} has schema version {found}, newer than this "
                    f"release's {t.SCHEMA_VERSION}: upgrade compiled-trainer to open it."
                )
            t.upsert(db, t.sweep, {"key": t.VERSION_KEY, "value": str(t.SCHEMA_VERSION)}, ("key",))

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def transaction(self, serialize: bool = True) -> Iterator[Connection]:
        """A writer's transaction, exclusive among the sweep's writers (SQLite: BEGIN
        IMMEDIATE; PostgreSQL: the sweep's advisory lock). `serialize=False`, for writes of
        given values to given rows that read nothing first: on PostgreSQL no sweep lock (its
        row locks suffice), so they never queue behind a hand-out."""
        with self.engine.begin() as db:
            if serialize and not self.storage.is_sqlite:
                db.execute(select(func.pg_advisory_xact_lock(self.storage.lock_key)))
            yield db

    @contextmanager
    def alone(self, write: bool) -> Iterator[Connection]:
        """One statement, its own transaction: on PostgreSQL without BEGIN and COMMIT (the
        server's autocommit: one round trip, not three); on SQLite a writer's transaction
        that serializes nothing (`write`), else a reader's."""
        if self.storage.is_sqlite:
            with self.transaction(serialize=False) if write else self.reading() as db:
                yield db
            return
        with self.engine.connect() as db:
            yield db.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A reader's transaction (one snapshot for its statements; takes no writer's lock)."""
        with self.engine.connect() as db:
            db.execution_options(**READ)
            with db.begin():
                yield db

    # sweep-level keys -------------------------------------------------------------------
    def set(self, key: str, value: Any, db: Connection | None = None) -> None:
        """Set a sweep key (inside the transaction `db` when given, else in its own)."""
        if db is None:
            return self._set(key, value)
        t.upsert(db, t.sweep, {"key": key, "value": json.dumps(value)}, ("key",))
        return None

    @retrying
    def _set(self, key: str, value: Any) -> None:
        with self.transaction() as db:
            self.set(key, value, db)

    @retrying
    def get(self, key: str, default: Any = None, db: Connection | None = None) -> Any:
        if db is None:
            with self.reading() as db:
                return self.get(key, default, db)
        row = db.execute(select(t.sweep.c.value).where(t.sweep.c.key == key)).scalar()
        return default if row is None else json.loads(row)

    @property
    def config(self) -> dict[str, Any]:
        return self.get("config")

    # runs ------------------------------------------------------------------------------------
    @staticmethod
    def _rows(
        db: Connection, where: ColumnElement[bool] | None = None, history: bool = True
    ) -> list[RunRecord]:
        """The runs `where` selects (all: None), in seq order, with their histories (without:
        `history` False, for a look that reads none)."""
        query = select(t.runs).order_by(t.runs.c.seq)
        out = [record(tuple(r)) for r in db.execute(query if where is None else query.where(where))]
        if history:
            read_histories(db, out)
        return list(out)

    @retrying
    def runs(self) -> list[RunRecord]:
        """Every run with its history, in seq order (from the store's copy, brought up to
        date: trainer.sweep.store.known_runs)."""
        with self.known.lock, self._keeping_known():
            with self.reading() as db:
                self.known.sync(db)
                with self.known.using(db):
                    self.known.fill_histories()
            return list(self.known.all)

    @contextmanager
    def _keeping_known(self) -> Iterator[None]:
        """The copy of the runs stands only if the transactions it read in commit: forgotten
        (read afresh next time) when one fails."""
        try:
            yield
        except BaseException:
            self.known.reset()
            raise

    @retrying
    def run(self, run_id: str) -> RunRecord:
        with self.reading() as db:
            found = self._rows(db, t.runs.c.id == run_id)
        if not found:
            raise KeyError(f"no run {run_id!r} in sweep store {self.where}")
        return found[0]

    @retrying
    def stop_requested(self, run_id: str) -> int:
        """Whether the run is asked to stop, and by whom (0: no; else records.STOP_BY_*: its
        engine, its owner, the sweep's cancel); one column, for the agent's poll."""
        with self.alone(write=False) as db:
            row = db.execute(_STOP_FLAG, {"run_id": run_id}).first()
        if row is None:
            raise KeyError(f"no run {run_id!r} in sweep store {self.where}")
        return int(row[0])

    def claim(
        self,
        propose: Callable[[list[RunRecord]], tuple[dict, dict | None] | None],
        *,
        new_id: Callable[[], str],
        agent_pid: int,
        rerun_crashed: bool = RunnerConf.rerun_crashed,
        pool: DeviceChooser | None = None,
    ) -> RunRecord | None | Busy:
        """Hand out the next run exactly once: a preempted or lost run, or with `rerun_crashed`
        a crashed one, to rerun (a preempted or lost one, or an interrupted one with its
        checkpoint, resumes in place: same id, run dir and history), else what `propose`
        suggests given the runs so far (None: the sweep has nothing more to run; it may write
        beside the claim through `self.claiming`). With a device `pool`, the run also gets
        free devices of this machine, or nothing is handed out while none is free (BUSY).
        Idempotent: a claim tried again after its reply was lost (the connection dropped after
        the commit) returns the run the agent already holds, never a second one."""
        agent = Holder.of(agent_pid)  # a process of this host: its start time is read here
        ticket = uuid.uuid4().hex  # the same for every try of this claim
        return self._claim(Claim(ticket, propose, new_id, agent, pool, rerun_crashed))

    @retrying
    def _claim(self, claim: Claim) -> RunRecord | None | Busy:
        """One try of a claim: in its transaction, the run that an earlier try of the same
        ticket handed out (its reply lost with the connection), else the next one."""
        claim.tries.append(1)
        with self.known.lock, self._keeping_known(), self.transaction() as db:
            self.claiming = db
            try:
                again = len(claim.tries) > 1 and self._rows(db, t.runs.c.ticket == claim.ticket)
                if again:  # only a try after a lost connection can find one
                    return again[0]
                return self._hand_out(db, claim)
            finally:
                self.claiming = None

    def _hand_out(self, db: Connection, claim: Claim) -> RunRecord | None | Busy:
        """Inside the claim's transaction: the run handed out (None, BUSY). None while its owner
        has paused, stopped or cancelled the sweep (the agent then reads why). The runs are
        the store's copy, brought up to date here (reading only what changed: known_runs);
        a history is read only if the proposal asks for one."""
        known = self.known
        known.sync(db)
        if self._mark_lost(db, known.running()):  # a run lost with its agent goes back first
            known.sync(db)
        agent, pool = claim.agent, claim.pool
        self._beat(db, agent, time.time())  # its CPU slot, if it holds one, stays its own
        if self.lifecycle(db)[0] in steering.HALTED:
            return None
        runs: list[RunRecord] = list(known.all) if pool is not None else []
        if pool is not None and not pool.available(runs):
            return BUSY
        crashed = self._to_rerun(known.to_rerun(), claim.rerun_crashed)
        if crashed is not None and crashed.resumable:
            devices = pool.choose(runs, crashed.params) if pool is not None else None
            fields = dict(state="running", agent_pid=agent.pid, agent_started=agent.started)
            fields.update(pid=None, exit_code=None, ended_at=None, log_tail=None)
            fields.update(heartbeat_at=time.time(), host=agent.host, devices=to_json(devices))
            fields.update(ticket=claim.ticket)
            db.execute(update(t.runs).where(t.runs.c.id == crashed.id).values(**fields))
            if crashed.state in TERMINAL:  # a crashed run runs again: every copy reads it anew
                self.touch(db, [crashed.id])
            return self._rows(db, t.runs.c.id == crashed.id)[0]
        if crashed is not None:
            db.execute(update(t.runs).where(t.runs.c.id == crashed.id).values(superseded=1))
            self.touch(db, [crashed.id])
            params, info = crashed.params, None
        else:
            with known.using(db):
                proposal = claim.propose(known.live())
            if proposal is None:
                return None
            params, info = proposal
        devices = pool.choose(runs, params) if pool is not None else None
        rerun_of = crashed.id if crashed else None
        new = (claim.new_id(), params, info, agent, rerun_of, devices, claim.ticket)
        return self._insert(db, *new)

    @staticmethod
    def _insert(
        db: Connection,
        run_id: str,
        params: dict,
        info: dict | None,
        agent: Holder,
        rerun_of: str | None,
        devices: list[str] | None,
        ticket: str,
    ) -> RunRecord:
        """A new running run of `agent`, holding `devices` (its record, read from no row)."""
        now = time.time()
        record = RunRecord(
            id=run_id,
            seq=0,
            state="running",
            params=params,
            search_info=info,
            agent_pid=agent.pid,
            rerun_of=rerun_of,
            created_at=now,
            started_at=now,
            heartbeat_at=now,
            host=agent.host,
            devices=devices,
            agent_started=agent.started,
            ticket=ticket,
        )
        row = {k: v for k, v in vars(record).items() if k not in UNSET}
        for key in ("params", "search_info", "devices"):  # as a reader gets them back
            row[key] = to_json(row[key])
            setattr(record, key, None if row[key] is None else json.loads(row[key]))
        record.seq = db.execute(t.runs.insert().values(**row)).inserted_primary_key[0]
        return record

    @staticmethod
    def touch(db: Connection, run_ids: list[str]) -> None:
        """Inside a writer's transaction: these runs, ended, were written: the sweep's change
        counter goes up and marks them, so that every store's copy reads them again."""
        raised = update(t.revision).values(n=t.revision.c.n + 1)
        if db.dialect.update_returning:
            n = db.execute(raised.returning(t.revision.c.n)).scalar()
        else:
            db.execute(raised)
            n = db.execute(select(t.revision.c.n)).scalar()
        db.execute(update(t.runs).where(t.runs.c.id.in_(run_ids)).values(changed=n))

    def _written(
        self, db: Connection, run_id: str, values: dict[str, Any], *read: Any
    ) -> Row | None:
        """Inside a writer's transaction: `values` written to run `run_id`; its columns `read`
        as written (None: no such run). A run that has ended is marked changed (`touch`)."""
        r = t.runs.c
        write = update(t.runs).where(r.id == run_id).values(**values)
        if db.dialect.update_returning:
            row = db.execute(write.returning(r.state, *read)).first()
        else:
            db.execute(write)
            row = db.execute(select(r.state, *read).where(r.id == run_id)).first()
        if row is not None and row[0] in TERMINAL:
            self.touch(db, [run_id])
        return row

    @staticmethod
    def _to_rerun(runs: list[RunRecord], rerun_crashed: bool) -> RunRecord | None:
        """The run to hand out again, if any: a preempted one (always), else with
        `rerun_crashed` a crashed one; not yet rerun, resumable ones first."""
        states = ("preempted", "crashed") if rerun_crashed else ("preempted",)
        for state in states:
            ended = [r for r in runs if r.state == state and not r.superseded]
            resumable = [r for r in ended if r.resumable]
            if ended:
                return (resumable or ended)[0]
        return None

    @retrying
    def update(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        values = {k: json.dumps(v) if k in JSON_COLUMNS else v for k, v in fields.items()}
        if values.get("state") not in TERMINAL and not self.storage.is_sqlite:
            # a run that has not ended and does not end now: no `touch`, one statement
            going = (t.runs.c.id == run_id) & _GOING
            with self.alone(write=True) as db:
                if db.execute(update(t.runs).where(going).values(**values)).rowcount:
                    return
        with self.transaction(serialize=False) as db:
            self._written(db, run_id, values)

    @retrying
    def update_held(self, run_id: str, agent_pid: int, **fields: Any) -> bool:
        """Update `run_id` only while the agent `agent_pid` of this host still holds it (it
        runs under that agent); False when the run went to another agent meanwhile (this agent
        was taken for lost: stopped, or silent too long), whose record then stands."""
        values = {k: json.dumps(v) if k in JSON_COLUMNS else v for k, v in fields.items()}
        r = t.runs.c
        held = (r.id == run_id) & (r.agent_pid == agent_pid) & (r.host == this_host())
        with self.alone(write=True) as db:
            done = db.execute(update(t.runs).where(held & (r.state == "running")).values(**values))
        return done.rowcount > 0

    @retrying
    def add_metrics(self, run_id: str, rows: list[dict[str, Any]], first_step: int) -> None:
        """Append per-epoch metric rows (step = epoch index) and refresh the heartbeat."""
        if rows and not self.storage.is_sqlite:  # a run that has not ended: one statement
            steps = [first_step + i for i in range(len(rows))]
            given = dict(run_id=run_id, now=time.time(), steps=steps)
            given["data"] = [json.dumps(row) for row in rows]
            with self.alone(write=True) as db:
                if len(db.execute(_REPORT, given).all()) == len(rows):
                    return
        with self.transaction(serialize=False) as db:
            for i, row in enumerate(rows):
                values = {"run_id": run_id, "step": first_step + i, "data": json.dumps(row)}
                t.upsert(db, t.metrics, values, ("run_id", "step"))
            beat = {"heartbeat_at": time.time(), "reports": t.runs.c.reports + 1}
            self._written(db, run_id, beat)

    @retrying
    def heartbeat(self, run_id: str) -> int:
        """The run's agent lives: the run's heartbeat and its agent's CPU slot's. Returns whether
        the run is asked to stop, as `stop_requested` (read in the same transaction: the
        agent's poll of its owner's stop and cancel costs no round trip of its own)."""
        now, r, s = time.time(), t.runs.c, t.agent_slots.c
        if not self.storage.is_sqlite:  # a run that has not ended: one statement
            with self.alone(write=True) as db:
                asked = db.execute(_BEAT, {"now": now, "run_id": run_id}).first()
            if asked is not None:
                return int(asked[0] or 0)
        with self.transaction(serialize=False) as db:
            row = self._written(
                db, run_id, {"heartbeat_at": now}, r.stop_requested, r.host, r.agent_pid
            )
            if row is None:
                return 0
            _, asked, host, pid = row
            held = (s.host == host) & (s.pid == pid)
            db.execute(update(t.agent_slots).where(held).values(heartbeat_at=now))
            return int(asked or 0)

    @retrying
    def beat_agent(self, agent_pid: int) -> None:
        """An agent of this host that holds no run lives (it waits on a paused sweep): its CPU
        slot's heartbeat, so no other agent takes its cores."""
        with self.transaction(serialize=False) as db:
            self._beat(db, Holder.of(agent_pid), time.time())

    @retrying
    def request_stop(self, run_ids: list[str]) -> None:
        with self.transaction(serialize=False) as db:
            for run_id in run_ids:
                self.ask_to_stop(db, run_id)

    @staticmethod
    def ask_to_stop(db: Connection, run_id: str) -> None:
        """Inside a transaction: its engine asks `run_id`, if it still runs and nobody asked
        yet, to stop."""
        r = t.runs.c
        running = (r.id == run_id) & (r.state == "running") & (r.stop_requested == 0)
        db.execute(update(t.runs).where(running).values(stop_requested=STOP_BY_ENGINE))

    @retrying
    def mark_lost_runs(self, stale_s: float = STALE_S) -> list[str]:
        """Give back the running runs whose agent is gone: an agent of this host whose process no
        longer runs (or that was silent for `stale_s`); an agent of another host whose heartbeat
        is older than `stale_s` (its PID means nothing here). A lost run is not its own fault:
        it goes back to the sweep as `preempted` (the next agent resumes it from its last.pt),
        up to the sweep's `max_retries` losses; lost once more, it is `crashed`, and says why.
        A lost run's trial still running on this host is ended."""
        with self.transaction() as db:
            running = self._rows(db, t.runs.c.state == "running", history=False)
            return self._mark_lost(db, running, stale_s)

    def _mark_lost(
        self, db: Connection, running: list[RunRecord], stale_s: float = STALE_S
    ) -> list[str]:
        """Inside a transaction: `mark_lost_runs` of the `running` runs (a claim does it first,
        in its own). An agent of this host is looked up once however many runs it holds."""
        lost: list[str] = []
        now, limit = time.time(), None
        alive: dict[Any, bool] = {}
        for r in running:
            agent = r.agent
            if agent.is_me:
                continue
            if not agent.silent(stale_s, now):
                key = (agent.host, agent.pid, agent.started) if agent.here else agent
                if key not in alive:
                    alive[key] = agent.alive(stale_s, now)
                if alive[key]:
                    continue
            if limit is None:  # the sweep's, else the default
                limit = self.get("max_retries", RunnerConf.max_retries, db)
            values = dict(_lost(r, limit, stale_s), ended_at=now, pid=None)
            if r.stop_requested in STOPPED_AS:  # its owner stopped it, or cancelled the sweep
                values.update(state=STOPPED_AS[r.stop_requested], log_tail=None)
            db.execute(update(t.runs).where(t.runs.c.id == r.id).values(**values))
            lost.append(r.id)
            kill_orphan(r.pid, r.id, r.host)
        return lost

    @retrying
    def running_elsewhere(self) -> list[RunRecord]:
        """The runs other agents are training now (this process's excluded)."""
        with self.reading() as db:
            running = self._rows(db, t.runs.c.state == "running")
        return [r for r in running if not r.agent.is_me]

    @retrying
    def live_agents(self, stale_s: float = STALE_S) -> list[Holder]:
        """The sweep's agents that live now, of every host, read without changing the ledger."""
        s = t.agent_slots.c
        with self.reading() as db:
            rows = db.execute(select(s.host, s.pid, s.started, s.heartbeat_at)).fetchall()
        now = time.time()
        return [h for h in (Holder(*row) for row in rows) if h.alive(stale_s, now)]

    # the slot ledger: the cores each live agent holds ------------------------------------------
    @staticmethod
    def cpu_slots(db: Connection, stale_s: float = STALE_S) -> list[CpuSlot]:
        """Inside a transaction: the CPU slots of the sweep's live agents, every host's (a
        dead agent's row is deleted: its cores are free again)."""
        now, live = time.time(), []
        s = t.agent_slots.c
        rows = db.execute(select(s.host, s.pid, s.started, s.heartbeat_at, s.cores, s.cpus))
        for host, pid, started, beat, cores, cpus in rows.fetchall():
            holder = Holder(host, pid, started, beat)
            if holder.alive(stale_s, now):
                live.append(CpuSlot(holder, tuple(json.loads(cores)), cpus))
            else:
                db.execute(delete(t.agent_slots).where((s.host == host) & (s.pid == pid)))
        return live

    @staticmethod
    def hold_cpu_slot(
        db: Connection, agent: Holder, cores: tuple[int, ...] | None, cpus: int = 0
    ) -> None:
        """Inside a transaction: record `agent`'s cores (None: it holds none now)."""
        s = t.agent_slots.c
        db.execute(delete(t.agent_slots).where((s.host == agent.host) & (s.pid == agent.pid)))
        if cores is not None:
            db.execute(
                t.agent_slots.insert().values(
                    host=agent.host,
                    pid=agent.pid,
                    started=agent.started,
                    heartbeat_at=time.time(),
                    cores=json.dumps(cores),
                    cpus=cpus,
                )
            )

    @staticmethod
    def _beat(db: Connection, agent: Holder, now: float) -> None:
        s = t.agent_slots.c
        mine = (s.host == agent.host) & (s.pid == agent.pid)
        db.execute(update(t.agent_slots).where(mine).values(heartbeat_at=now))

    # the sweep's lifecycle, as its owner steers it (trainer.sweep.store.steering) --------------
    @retrying
    def lifecycle(self, db: Connection | None = None) -> tuple[str, steering.Change | None]:
        """The state the owner's verbs act on (steering.lifecycle) and its last change."""
        if db is None:
            with self.reading() as db:
                return self.lifecycle(db)
        keys = (steering.STEERED_KEY, "state")
        rows = db.execute(select(t.sweep.c.key, t.sweep.c.value).where(t.sweep.c.key.in_(keys)))
        found = {key: json.loads(value) for key, value in rows}
        change = steering.Change.of(found.get(steering.STEERED_KEY))
        return steering.lifecycle(found.get("state"), change), change

    @retrying
    def steer(self, verb: str, sweep_id: str, by: str, now: float | None = None) -> steering.Change:
        """Apply `verb` (pause, resume, stop, cancel) to the sweep in one transaction: its new
        state and who changed it when; `cancel` also asks every running run to stop now (its
        agent sends SIGTERM at its next poll) and ends the runs waiting to resume. SteerError,
        nothing changed, when the verb does not apply."""
        with self.transaction() as db:
            state, change = self.lifecycle(db)
            after = steering.next_state(verb, state, change, sweep_id)
            done = steering.Change(after, verb, by, time.time() if now is None else now)
            self.set("state", after, db)
            self.set(steering.STEERED_KEY, done.to_dict(), db)
            if verb == "cancel":
                self._end_runs(db, self._going(db), STOP_BY_CANCEL)
        return done

    @retrying
    def stop_runs(self, run_ids: list[str], sweep_id: str) -> list[RunRecord]:
        """Its owner stops these runs, as hyperband would: a running one is asked to stop (its
        agent sends SIGTERM at its next poll; `last.pt` kept; it ends `stopped`), one waiting
        to resume ends `stopped` now; neither is handed out again by itself. SteerError,
        nothing changed, for an unknown run or one that has ended. The runs, as they were."""
        with self.known.lock, self._keeping_known(), self.transaction() as db:
            self.known.sync(db)
            by_id = {r.id: r for r in self.known.live()}
            problem = steering.unknown_runs(run_ids, list(by_id), sweep_id)
            if problem is None:
                going = ("running", "preempted")
                ended = {i: by_id[i].state for i in run_ids if by_id[i].state not in going}
                problem = steering.ended_runs(ended, sweep_id)
            if problem is not None:
                raise steering.SteerError(problem)
            self._end_runs(db, run_ids, STOP_BY_OWNER)
        return [by_id[i] for i in run_ids]

    @staticmethod
    def _going(db: Connection) -> list[str]:
        """Inside a transaction: the ids of the runs that train or wait to resume."""
        r = t.runs.c
        going = r.state.in_(("running", "preempted")) & (r.superseded == 0)
        return list(db.execute(select(r.id).where(going)).scalars())

    @staticmethod
    def _end_runs(db: Connection, run_ids: list[str], code: int) -> None:
        """Inside a transaction: ask the running ones of `run_ids` to stop (`code`: who asks);
        end the ones waiting to resume at once, in the state `code` gives."""
        r = t.runs.c
        for run_id in run_ids:
            running = (r.id == run_id) & (r.state == "running")
            db.execute(update(t.runs).where(running).values(stop_requested=code))
            waiting = (r.id == run_id) & (r.state == "preempted")
            ended = dict(state=STOPPED_AS[code], stop_requested=code, ended_at=time.time())
            db.execute(update(t.runs).where(waiting).values(**ended))
