"""A real PostgreSQL server for the store's tests: pgserver (the dev extra) starts one in a
temporary folder, on a Unix socket, once per test session, and removes it at the end. The role
`sweeper` has a password and owns the database `sweeps`; each test keeps its sweep in its own
schema. pgserver has no wheel for Python 3.13: there the tests that need a server are skipped."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

PASSWORD = "pw-" + uuid.uuid4().hex[:12]


@dataclass
class Postgres:
    """The session's server: its URLs and a way to stop and start it again."""

    server: object
    pgdata: Path

    @property
    def socket_dir(self) -> str:
        with _quiet():  # get_uri reads pgserver's runtime folder too
            uri = self.server.get_uri()
        return parse_qs(urlparse(uri).query)["host"][0]

    def url(self, password: bool = True, user: str = "sweeper") -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql://{user}{secret}@/sweeps?host={self.socket_dir}"

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        log = str(self.pgdata / "log")
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", log, "start")


@pytest.fixture(scope="session")
def postgres():
    try:
        with _quiet():  # it reads its runtime folder on import
            import pgserver
    except ImportError:
        pytest.skip(
            "pgserver (dev extra) is not installed: it has no wheel for this Python (3.13), "
            "and the PostgreSQL store tests need the real server it ships"
        )
    pgdata = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
    with _quiet():
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
        server.psql(
            f"CREATE ROLE sweeper LOGIN PASSWORD '{PASSWORD}'; "
            "CREATE DATABASE sweeps OWNER sweeper;"
        )
    running = Postgres(server, pgdata)
    try:
        yield running
    finally:
        with _quiet():
            server.cleanup()
            if (pgdata / "postmaster.pid").exists():  # started again by a test: not pgserver's
                running.stop()
        shutil.rmtree(pgdata, ignore_errors=True)


@contextlib.contextmanager
def _quiet():
    """pgserver's platformdirs warns that root has no XDG_RUNTIME_DIR: not the tests' concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
