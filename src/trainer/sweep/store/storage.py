"""Where a sweep's store lives (`hydra.sweeper.storage`, `--storage`): unset, the embedded SQLite
file `<sweep dir>/sweep.db`; a URL `postgresql://user@host:5432/db` (SQLAlchemy's spelling, as
Optuna's `storage=`), that PostgreSQL server, through psycopg 3 (the `[postgres]` extra).

The password comes from the URL, `PGPASSWORD` or `~/.pgpass` (libpq reads the last two) and is
never stored or printed: `Storage.shown` is the URL without it. Engines: SQLite keeps WAL, a
60 s busy timeout and `BEGIN IMMEDIATE` for writers (SQLAlchemy's pysqlite recipe); PostgreSQL
pings pooled connections before use (`_ping_when_needed`) and gives each sweep its own schema
`sweep_<id>`. A reader's engine (`read_only=True`, the dashboard) cannot write: PostgreSQL's
read-only transactions; SQLite's `mode=ro`, `immutable=1` while no writer has the file open."""

from __future__ import annotations

import contextvars
import hashlib
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InvalidatePoolError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from trainer.errors import TrainerError

BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 10
INSTALL = "pip install 'compiled-trainer[postgres]'"
READ = {"sweep_read": True}  # execution option: a reader's transaction (SQLite: plain BEGIN)
PING_IDLE_S = 30.0  # a pooled connection idle longer is pinged before use in any case
_IDLE_SINCE = "sweep_idle_since"  # in a pooled connection's info: when it was last given back
# True while a store operation runs that is tried again after a lost connection
# (trainer.sweep.store.reconnect.retrying)
RETRIED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sweep_store_retrying", default=False
)


class StorageError(TrainerError):
    """A storage URL that names no usable database (exit 2: nothing launched)."""


def shown(url: str | URL) -> str:
    """The URL as it may be stored or printed: without its password."""
    return make_url(url)._replace(password=None).render_as_string(hide_password=False)


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise StorageError(
            f"hydra.sweeper.storage / --storage: {url!r} is not a database URL ({err}); give "
            "e.g. postgresql://user@host:5432/db, or leave it unset for the sweep's own sweep.db."
        ) from None
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise StorageError(
            f"hydra.sweeper.storage / --storage: {shown(parsed)} names the "
            f"{parsed.get_backend_name()!r} database; the sweep store runs on PostgreSQL "
            "(postgresql://user@host:5432/db) or, unset, on the sweep's own SQLite sweep.db."
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not psycopg2
    return parsed


def schema_of(sweep_id: str) -> str:
    """The PostgreSQL schema of a sweep: `sweep_<id>`, lower case, other characters as `_`
    (a long id keeps a digest so it stays within PostgreSQL's 63 characters)."""
    name = "sweep_" + re.sub(r"[^a-z0-9_]", "_", sweep_id.lower())
    if len(name) > 63:
        name = name[:50] + "_" + hashlib.sha1(sweep_id.encode()).hexdigest()[:12]
    return name


@dataclass(frozen=True)
class Storage:
    """A store's database: its URL (with any password given, never shown) and, on PostgreSQL,
    the schema of the sweep."""

    url: URL
    schema: str | None = None

    @classmethod
    def sqlite(cls, path: str | Path) -> Storage:
        return cls(URL.create("sqlite", database=str(path)))

    @classmethod
    def server(cls, url: str, sweep_id: str | None) -> Storage:
        parsed = _parse(url)
        if parsed.get_backend_name() == "sqlite":
            return cls(parsed)
        return cls(parsed, schema_of(sweep_id) if sweep_id else None)

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def shown(self) -> str:
        return shown(self.url)

    @property
    def lock_key(self) -> int:
        """The sweep's transaction-level advisory lock on PostgreSQL (a signed 64-bit key)."""
        digest = hashlib.blake2b(str(self.schema).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)


def _sqlite_engine(storage: Storage) -> Engine:
    engine = create_engine(storage.url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # pysqlite's own BEGIN off: ours below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        reader = conn.get_execution_options().get("sweep_read", False)
        conn.exec_driver_sql("BEGIN" if reader else "BEGIN IMMEDIATE")

    return engine


def _sqlite_reader(storage: Storage) -> Engine:
    """An engine that only reads the SQLite file: each connection opens it `mode=ro`, and
    `immutable=1` while no writer holds it (no -wal file: its last writer closed and
    checkpointed), since even a read-only connection to a WAL database leaves -wal and -shm
    files behind. Connections are not pooled: each read decides afresh."""
    path = Path(storage.url.database).resolve()

    def connect() -> sqlite3.Connection:
        quiet = not path.with_name(path.name + "-wal").exists()
        uri = f"{path.as_uri()}?mode=ro" + ("&immutable=1" if quiet else "")
        return sqlite3.connect(
            uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )

    engine = create_engine("sqlite://", creator=connect, poolclass=NullPool)

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def _prepare_threshold(url: URL) -> tuple[URL, dict]:
    """psycopg's `prepare_threshold` given in the URL's query (`?prepare_threshold=none`: no
    server-side prepared statements, as PgBouncer in transaction mode before 1.22 needs): the
    URL without it, and the connect argument."""
    query = dict(url.query)
    if "prepare_threshold" not in query:
        return url, {}
    given = str(query.pop("prepare_threshold"))
    if given.lower() in ("none", "off"):
        return url.set(query=query), {"prepare_threshold": None}
    if not given.isdigit():
        raise StorageError(
            f"hydra.sweeper.storage / --storage: prepare_threshold={given!r} in {shown(url)} is "
            "neither a count nor none; give ?prepare_threshold=none (through PgBouncer in "
            "transaction mode) or a number of executions before a statement is prepared."
        )
    return url.set(query=query), {"prepare_threshold": int(given)}


def _postgres_engine(storage: Storage, read_only: bool = False) -> Engine:
    connect_args: dict = {"connect_timeout": CONNECT_TIMEOUT_S}
    if read_only:  # the server refuses every write of this engine's transactions
        connect_args["options"] = "-c default_transaction_read_only=on"
    url, prepare = _prepare_threshold(storage.url)
    connect_args.update(prepare)
    try:
        engine = create_engine(
            url,
            pool_size=2,
            max_overflow=4,
            connect_args=connect_args,
        )
    except (ImportError, NoSuchModuleError) as err:
        raise StorageError(
            f"hydra.sweeper.storage / --storage: {storage.shown} needs psycopg 3, which is not "
            f"installed ({err}); install the [postgres] extra: {INSTALL}"
        ) from None
    _ping_when_needed(engine)
    if storage.schema is not None:
        engine = engine.execution_options(schema_translate_map={None: storage.schema})
    return engine


def _ping_when_needed(engine: Engine) -> None:
    """Ping a pooled connection before use, as `pool_pre_ping` does (one that is gone is
    replaced, and every older one with it), but not for an operation that is tried again after
    a lost connection anyway (`RETRIED`) on a connection used less than PING_IDLE_S ago: most
    operations then save the ping's round trip."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection, record) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection, record, _proxy) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None:  # connected just now
            return
        if RETRIED.get() and time.monotonic() - since < PING_IDLE_S:
            return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as err:
            if not dialect.is_disconnect(err, dbapi_connection, None):
                raise
            alive = False
        if not alive:
            raise InvalidatePoolError()


def make_engine(storage: Storage, *, read_only: bool = False) -> Engine:
    """The engine of `storage` (StorageError when its driver is not installed); with
    `read_only`, one that cannot write (see the module's doc)."""
    if storage.is_sqlite and read_only:
        return _sqlite_reader(storage)
    if storage.is_sqlite:
        Path(storage.url.database).parent.mkdir(parents=True, exist_ok=True)
        return _sqlite_engine(storage)
    return _postgres_engine(storage, read_only)


def reason(err: BaseException) -> str:
    """The server's own words for a failed connection, on one line."""
    cause = getattr(err, "orig", None) or err
    return " ".join(str(cause).split()) or type(cause).__name__


def unreachable_error(storage: Storage, err: DBAPIError) -> StorageError:
    """The error of a server that cannot be reached or refuses the login."""
    return StorageError(
        f"hydra.sweeper.storage / --storage: cannot use the sweep database {storage.shown} "
        f"(the server says: {reason(err)}). Check that the server runs and is reachable from this machine, the "
        "user and database names, and the password (in the URL, PGPASSWORD or ~/.pgpass); "
        "nothing was launched."
    )


def check(engine: Engine, storage: Storage) -> None:
    """Connect once, so that an unreachable server or a refused login is a clear error now."""
    if storage.is_sqlite:
        return
    try:
        with engine.connect() as db:
            db.execute(text("SELECT 1"))
    except DBAPIError as err:
        raise unreachable_error(storage, err) from None
