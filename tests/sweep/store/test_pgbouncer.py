"""The sweep store through PgBouncer in transaction mode (server connections shared between
clients transaction by transaction), as a fleet beyond one server's connections uses it: agents
claiming at once get each run once, and reports, heartbeats and the runs read all work, with
`?prepare_threshold=none` in the URL (PgBouncer before 1.22 keeps no prepared statements)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.sweep.store.conftest import PASSWORD
from trainer.sweep.store.opening import open_store
from trainer.sweep.store.storage import Storage, StorageError, make_engine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("pgbouncer") is None, reason="pgbouncer is not installed"),
]
AGENTS, CLAIMS = 6, 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bouncer(postgres):
    """PgBouncer in transaction mode before the session's server: its URL."""
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))  # readable by its user (not root's)
    port = _free_port()
    (folder / "users.txt").write_text(f'"sweeper" "{PASSWORD}"\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\nsweeps = host={postgres.socket_dir} dbname=sweeps\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = plain\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        "default_pool_size = 3\nmax_client_conn = 100\n"
        f"logfile = {folder / 'log'}\npidfile = {folder / 'pid'}\n"
    )
    argv = ["pgbouncer", str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # it refuses to run as root: as the server's own user
        argv[1:1] = ["-u", postgres.server.system_user]
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, user=postgres.server.system_user)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not _listens(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log = (folder / "log").read_text() if (folder / "log").exists() else ""
            raise RuntimeError(f"pgbouncer did not start: {proc.communicate()[0]!r} {log}")
        time.sleep(0.1)
    try:
        yield f"postgresql://sweeper:{PASSWORD}@127.0.0.1:{port}/sweeps?prepare_threshold=none"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def _listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_agents_share_a_sweep_through_pgbouncer_in_transaction_mode(bouncer, tmp_path):
    sweep_id = "b" + uuid.uuid4().hex[:8]
    store = open_store(tmp_path / "sweep", bouncer, sweep_id)
    handed: list[str] = []
    errors: list[str] = []

    def agent(i: int) -> None:
        mine = open_store(tmp_path / "sweep", bouncer, sweep_id)
        try:
            for n in range(CLAIMS):
                run = mine.claim(
                    lambda runs: ({"i": len(runs)}, None),
                    new_id=lambda n=n: f"a{i}-{n}",
                    agent_pid=os.getpid(),
                )
                handed.append(run.id)
                mine.heartbeat(run.id)
                mine.add_metrics(run.id, [{"val/acc": n / 10}], 0)
                mine.runs()  # hyperband's look, many times over: statements prepared if ever
                mine.update_held(run.id, os.getpid(), state="finished", exit_code=0)
        except Exception as err:  # reported below, never silent
            errors.append(f"{type(err).__name__}: {err}")
        finally:
            mine.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[:3]
    runs = store.runs()
    assert len(handed) == len(set(handed)) == AGENTS * CLAIMS == len(runs)
    assert {r.state for r in runs} == {"finished"}
    assert all(r.history for r in runs)
    store.close()


def test_a_prepare_threshold_that_is_no_count_is_a_clear_error():
    with pytest.raises(StorageError, match="prepare_threshold='some'"):
        make_engine(Storage.server("postgresql://u@h/db?prepare_threshold=some", "s"))
