"""The one way to open a sweep's store: `open_store(sweep_dir, storage, sweep_id)`. Unset
storage: the database the sweep directory records (`storage.yaml`: the URL without password and
the sweep id), else its own SQLite `sweep.db` (warned about on a network filesystem). A URL:
that PostgreSQL server, the sweep in its own schema there (`sweep_<id>`); the directory records
it, so that `python -m trainer.agent <dir or id>` finds the database too."""

from __future__ import annotations

import difflib
from pathlib import Path

from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from trainer.errors import TrainerError
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout, record_storage, recorded
from trainer.sweep.store.netfs import warn_if_network
from trainer.sweep.store.storage import Storage, check, make_engine, schema_of, shown

PREFIX = "sweep_"  # the schema of sweep <id> is sweep_<id> (storage.schema_of)


def open_store(
    sweep_dir: str | Path, storage: str | None = None, sweep_id: str | None = None
) -> SweepStore:
    """The store of the sweep in `sweep_dir` (see the module's doc). `storage`: None, or a
    database URL (`postgresql://user[:password]@host:5432/db`; `postgresql://` means psycopg
    3). `sweep_id` names the sweep's schema on a server (default: the one the directory
    records, else the directory's name). A server that cannot be reached or refuses the login
    raises StorageError (exit 2); a missing psycopg too, naming the [postgres] extra."""
    layout = SweepLayout(Path(sweep_dir))
    known = recorded(layout.root)
    url = storage or (known or {}).get("url")
    if url is None:
        layout.root.mkdir(parents=True, exist_ok=True)
        warn_if_network(layout.root)
        return SweepStore(layout.db)
    sweep_id = sweep_id or (known or {}).get("sweep_id") or layout.root.name
    where = Storage.server(url, sweep_id)
    store = SweepStore(storage=where)
    if storage is not None and not where.is_sqlite:
        record_storage(layout, where.shown, sweep_id)
    return store


def open_reader(
    sweep_dir: str | Path, storage: str | None = None, sweep_id: str | None = None
) -> SweepStore:
    """The store of the sweep in `sweep_dir` (resolved as `open_store` does), opened to read
    only: nothing is created, upgraded, recorded or written, on SQLite or PostgreSQL."""
    layout = SweepLayout(Path(sweep_dir))
    known = recorded(layout.root) if layout.root.is_dir() else None
    url = storage or (known or {}).get("url")
    if url is None:
        if not layout.db.is_file():
            raise TrainerError(f"{layout.root}: no sweep.db (nor storage.yaml) there")
        return SweepStore(layout.db, read_only=True)
    sweep_id = sweep_id or (known or {}).get("sweep_id") or layout.root.name
    return SweepStore(storage=Storage.server(url, sweep_id), read_only=True)


def password_env(storage: str | None) -> dict[str, str]:
    """What an agent started for this sweep needs in its environment to log in when the URL
    carries the password: `PGPASSWORD` (start it by directory or with the password-free URL,
    `storage.shown(url)`, so the password is in no argv, job script or log)."""
    if storage is None:
        return {}
    password = make_url(storage).password
    return {} if password is None else {"PGPASSWORD": str(password)}


def open_sweep(storage: str, sweep_id: str, sweep_dir: str | Path) -> SweepStore:
    """The store of an existing sweep `sweep_id` on the server of `storage` (an agent or `show`
    on any machine); TrainerError naming the sweeps there when it holds no such sweep."""
    names = sweep_ids(storage)
    if schema_of(sweep_id)[len(PREFIX) :] not in names:
        listing = ", ".join(names) if names else "none"
        close = difflib.get_close_matches(sweep_id, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise TrainerError(
            f"--storage {shown(storage)}: no sweep {sweep_id!r} in that database ({hint}its sweeps: "
            f"{listing}; list them with python -m trainer.sweep ls --storage URL)."
        )
    return open_store(sweep_dir, storage, sweep_id)


def sweep_ids(storage: str) -> list[str]:
    """The ids of the sweeps kept in the database of `storage`, by their schemas; StorageError
    (exit 2) when it cannot be reached or refuses the login."""
    where = Storage.server(storage, None)
    engine = make_engine(where)
    try:
        check(engine, where)
        with engine.connect() as db:
            schemas = inspect(db).get_schema_names()
    finally:
        engine.dispose()
    return sorted(name[len(PREFIX) :] for name in schemas if name.startswith(PREFIX))


def require_reachable(storage: str | None) -> None:
    """Nothing, when `storage` is unset or a database that answers; else StorageError (exit 2)
    now, before a sweep's folder is made (a bad URL leaves nothing behind)."""
    if storage is not None and not Storage.server(storage, None).is_sqlite:
        sweep_ids(storage)
