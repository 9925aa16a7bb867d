"""The sweep store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL: the sweep's
keys, its runs and their per-epoch metrics, the slot ledger, the optimizer lease, its queue of
suggestions and the agents waiting for one. On PostgreSQL each sweep has its own schema
(`sweep_<id>`, through `schema_translate_map`), so the tables carry no schema here. The store's
schema is versioned by the `schema_version` key of `sweep`; a sweep.db written before the key
existed (version 1) gains the columns added since when it opens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    inspect,
)
from sqlalchemy.dialects import postgresql, sqlite

SCHEMA_VERSION = 3  # 1: the raw-sqlite3 store, before the version was recorded; 3: run changes
VERSION_KEY = "schema_version"

metadata = MetaData()

sweep = Table(
    "sweep",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", Text, unique=True, nullable=False),
    Column("state", Text, nullable=False),
    Column("params", Text, nullable=False),
    Column("search_info", Text),
    Column("agent_pid", Integer),
    Column("pid", Integer),
    Column("run_dir", Text),
    Column("log_path", Text),
    Column("exit_code", Integer),
    Column("log_tail", Text),
    Column("summary", Text),
    Column("stop_requested", Integer, nullable=False, server_default="0"),
    Column("rerun_of", Text),
    Column("superseded", Integer, nullable=False, server_default="0"),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("heartbeat_at", Float),
    Column("host", Text),
    Column("devices", Text),
    Column("agent_started", Float),
    # times a cluster's warning (time limit, preemption) stopped it before it resumed
    Column("preemptions", Integer, nullable=False, server_default="0"),
    # times it was lost without a word (its agent, job or host gone: SIGKILL, a node down, a
    # heartbeat lapsed); each time it was handed out again, up to the sweep's max_retries
    Column("losses", Integer, nullable=False, server_default="0"),
    # the claim that handed it out last: a claim tried again after its reply was lost (the
    # connection dropped after the commit) finds its run by it, and gets no second one
    Column("ticket", Text),
    # the sweep's change counter (`revision.n`) when a write last touched this run after it
    # had ended: a store's copy of the ended runs re-reads it (trainer.sweep.store.known_runs)
    Column("changed", Integer),
    # reports (metric rows written) so far: a copy re-reads the history only when it grew
    Column("reports", Integer, nullable=False, server_default="0"),
    sqlite_autoincrement=True,
)
# what a claim and the lost-run look select by (the runs that have not ended, a claim's
# ticket, the ended runs changed since a copy's last look)
Index("runs_state", runs.c.state)
Index("runs_ticket", runs.c.ticket)
Index("runs_changed", runs.c.changed)

# The sweep's change counter (one row): raised by each write to a run that has ended.
revision = Table(
    "revision",
    metadata,
    Column("one", Integer, primary_key=True, autoincrement=False),
    Column("n", Integer, nullable=False),
    CheckConstraint("one = 1"),
)

metrics = Table(
    "metrics",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("data", Text, nullable=False),
)

agent_slots = Table(
    "agent_slots",
    metadata,
    Column("host", Text, primary_key=True),
    Column("pid", Integer, primary_key=True),
    Column("started", Float),
    Column("heartbeat_at", Float, nullable=False),
    Column("cores", Text, nullable=False),
    Column("cpus", Integer, nullable=False),
)

optimizer_lease = Table(
    "optimizer_lease",
    metadata,
    Column("one", Integer, primary_key=True, autoincrement=False),
    Column("token", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("renewed_at", Float, nullable=False),
    Column("host", Text),
    Column("started", Float),
    CheckConstraint("one = 1"),
)

suggestions = Table(
    "suggestions",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("params", Text, nullable=False),
    Column("info", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    sqlite_autoincrement=True,
)

# Agents of any host waiting for a run; host NULL: a row written before hosts were recorded.
waiting_agents = Table(
    "waiting_agents",
    metadata,
    Column("host", Text, primary_key=True, nullable=True),
    Column("pid", Integer, primary_key=True, autoincrement=False),
    Column("started", Float),
    Column("since", Float, nullable=False),
    Column("heartbeat_at", Float),
)


def upsert(db: Connection, table: Table, values: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Insert `values`, or update the row with the same `keys` (the dialect's ON CONFLICT)."""
    dialect = postgresql if db.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(**values)
    changed = {k: statement.excluded[k] for k in values if k not in keys}
    db.execute(statement.on_conflict_do_update(index_elements=list(keys), set_=changed))


# A sweep.db written by the raw-sqlite3 store before these columns existed gains them.
_ADDED = {
    "runs": {
        "host": "TEXT",
        "devices": "TEXT",
        "agent_started": "REAL",
        "preemptions": "INTEGER NOT NULL DEFAULT 0",
        "losses": "INTEGER NOT NULL DEFAULT 0",
        "ticket": "TEXT",
        "changed": "INTEGER",
        "reports": "INTEGER NOT NULL DEFAULT 0",
    },
    "optimizer_lease": {"host": "TEXT", "started": "REAL"},
}


def migrate_sqlite(db: Connection) -> None:
    """Bring a sweep.db of an older release up to this schema, its rows kept: the columns added
    since, and `waiting_agents` rekeyed by (host, PID) (its old rows: host unknown). Only
    SQLite stores predate the versioned schema, so this DDL is SQLite's."""
    present = set(inspect(db).get_table_names())
    for table, added in _ADDED.items():
        if table not in present:
            continue
        columns = {c["name"] for c in inspect(db).get_columns(table)}
        for column, kind in added.items():
            if column not in columns:
                db.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    if "waiting_agents" in present:
        columns = {c["name"] for c in inspect(db).get_columns("waiting_agents")}
        if "host" not in columns:  # keyed by PID alone
            db.exec_driver_sql("ALTER TABLE waiting_agents RENAME TO waiting_agents_by_pid")
            waiting_agents.create(db)
            db.exec_driver_sql(
                "INSERT INTO waiting_agents (host, pid, since) SELECT NULL, pid, since "
                "FROM waiting_agents_by_pid"
            )
            db.exec_driver_sql("DROP TABLE waiting_agents_by_pid")
