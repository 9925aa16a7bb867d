"""The sweep store on a real PostgreSQL server (tests/sweep/store/conftest.py starts it): each
run handed out exactly once to agents claiming at the same time, another host's live run never
marked lost, the server restarting mid-sweep, a sweep resumed by id from another machine, the
password written nowhere, and clear errors for a server that cannot be reached or refuses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from trainer.errors import TrainerError
from trainer.sweep.report import leaderboard
from trainer.sweep.store.directory import SweepLayout, recorded
from trainer.sweep.store.liveness import STALE_S, this_host
from trainer.sweep.store.opening import open_store, open_sweep, sweep_ids
from trainer.sweep.store.storage import Storage

pytestmark = pytest.mark.slow
CLAIMER = Path(__file__).with_name("claimer.py")
CONFIG = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"i": {"values": [0, 1, 2]}},
}


def _new_sweep(url: str, sweep_dir: Path):
    sweep_id = "t" + uuid.uuid4().hex[:8]
    store = open_store(sweep_dir, url, sweep_id)
    store.set("config", CONFIG)
    store.set("sweep_id", sweep_id)
    return sweep_id, store


def _claim(store, run_id: str, rerun_crashed: bool = False):
    return store.claim(
        lambda runs: ({"i": len(runs)}, None),
        new_id=lambda: run_id,
        agent_pid=os.getpid(),
        rerun_crashed=rerun_crashed,
    )


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_eight_agents_claiming_at_once_get_each_run_exactly_once(postgres, tmp_path, backend):
    url = postgres.url() if backend == "postgresql" else ""
    sweep_dir = tmp_path / "sweep"
    sweep_id = "t" + uuid.uuid4().hex[:8]
    store = open_store(sweep_dir, url or None, sweep_id)
    argv = [sys.executable, str(CLAIMER), url, str(sweep_dir), sweep_id, "40"]
    go = tmp_path / "go"  # every claimer waits for it: they all claim at once
    env = {**os.environ, "CLAIMER_GO": str(go), "CLAIMER_HOLD_S": "0.05"}
    agents = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    for agent in agents:
        assert agent.stdout.readline().strip() == "ready"
    go.touch()
    outs = [agent.communicate(timeout=300)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0] * 8
    claimed = [run_id for out in outs for run_id in out.split()]
    runs = store.runs()
    assert len(runs) == 40 and sorted(claimed) == sorted(r.id for r in runs)  # each once
    assert sorted(r.params["i"] for r in runs) == list(range(40))  # no point twice, none lost
    assert sum(1 for out in outs if out.split()) > 1  # the agents did share the sweep


def test_a_live_run_of_another_host_is_never_lost_a_silent_one_is(postgres, tmp_path):
    _, store = _new_sweep(postgres.url(), tmp_path / "sweep")
    for run_id in ("live", "lapsed"):
        _claim(store, run_id)
    now = time.time()
    store.update("live", host="node-b", agent_pid=1, heartbeat_at=now)
    store.update("lapsed", host="node-b", agent_pid=1, heartbeat_at=now - STALE_S - 5)
    assert store.mark_lost_runs() == ["lapsed"]
    assert store.run("live").state == "running" and store.run("lapsed").state == "preempted"
    assert store.run("lapsed").losses == 1  # handed out again, resumed in place


def test_the_server_restarting_mid_sweep_loses_no_result(postgres, tmp_path):
    sweep_id, store = _new_sweep(postgres.url(), tmp_path / "sweep")
    _claim(store, "a")
    store.add_metrics("a", [{"val/acc": 0.5}], 0)
    postgres.stop()
    back = threading.Timer(3.0, postgres.start)
    back.start()
    began = time.monotonic()
    try:
        store.add_metrics("a", [{"val/acc": 0.9}], 1)  # reported while the server is down
        store.update("a", state="finished", summary={"val/acc": 0.9})
    finally:
        back.join()
    assert time.monotonic() - began > 2.5  # it did wait for the server
    fresh = open_store(tmp_path / "elsewhere", postgres.url(), sweep_id)
    run = fresh.run("a")
    assert run.state == "finished" and run.history == [{"val/acc": 0.5}, {"val/acc": 0.9}]
    assert _claim(fresh, "b").id == "b"  # and the sweep goes on


def test_a_sweep_resumes_by_id_from_another_machine(postgres, tmp_path):
    sweep_id, first = _new_sweep(postgres.url(), tmp_path / "host-a")
    _claim(first, "r1")
    first.update("r1", state="crashed")
    first.close()
    assert sweep_id in sweep_ids(postgres.url())
    fresh = open_sweep(postgres.url(), sweep_id, tmp_path / "host-b")  # a directory of its own
    assert [r.id for r in fresh.runs()] == ["r1"] and fresh.config == CONFIG
    assert _claim(fresh, "r2", rerun_crashed=True).rerun_of == "r1"
    entry = recorded(tmp_path / "host-b")
    assert entry == {"url": Storage.server(postgres.url(), None).shown, "sweep_id": sweep_id}
    again = open_store(tmp_path / "host-b")  # by the directory alone, as the agents it starts
    assert [r.id for r in again.runs()] == ["r1", "r2"]
    with pytest.raises(TrainerError, match="no sweep 'nosuch'"):
        open_sweep(postgres.url(), "nosuch", tmp_path / "host-c")


def _texts(folder: Path):
    for path in folder.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes().decode(errors="replace")


def test_the_password_is_written_nowhere(postgres, tmp_path):
    from tests.sweep.store.conftest import PASSWORD

    url = postgres.url()
    sweep_dir = tmp_path / "outputs" / "sweeps" / "s"
    sweep_id, store = _new_sweep(url, sweep_dir)
    run = _claim(store, "a")
    store.update(run.id, state="finished", summary={"val/acc": 0.5})
    leaderboard.write(store, sweep_id, SweepLayout(sweep_dir))
    cli = [sys.executable, "-m", "trainer.sweep", "--root", str(tmp_path / "outputs")]
    shows = [
        subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)
        for args in (["--storage", url, "ls"], ["--storage", url, "show", sweep_id], ["ls"])
    ]
    assert [s.returncode for s in shows] == [0, 0, 0], [s.stderr for s in shows]
    assert sweep_id in shows[0].stdout
    assert all(PASSWORD not in s.stdout + s.stderr for s in shows)
    written = dict(_texts(tmp_path))
    assert SweepLayout(sweep_dir).storage in written and SweepLayout(sweep_dir).results in written
    assert [p for p, text in written.items() if PASSWORD in text] == []


def _agent(tmp_path: Path, url: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "trainer.agent", "X", "--storage", url, "--root", str(tmp_path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_an_unreachable_server_is_a_clear_error_before_anything_runs(tmp_path):
    agent = _agent(tmp_path, "postgresql://nobody:secret-pw@127.0.0.1:1/db")
    assert agent.returncode == 2, agent.stderr
    assert agent.stderr.startswith("error: ") and "Traceback" not in agent.stderr
    assert "postgresql+psycopg://nobody@127.0.0.1:1/db" in agent.stderr
    assert "refused" in agent.stderr and "secret-pw" not in agent.stderr
    assert not (tmp_path / "sweeps").exists()  # nothing launched, nothing written


def test_a_sweep_on_an_unreachable_server_leaves_no_folder_behind(tmp_path):
    """The sweep command with a bad storage URL: exit 2 before the sweep's folder is made."""
    from tests.conftest import run_cli

    url = "postgresql://nobody:secret-pw@127.0.0.1:1/db"
    done = run_cli("sweep=lr_random", "compile=off", f"hydra.sweeper.storage={url}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "refused" in done.stderr and "secret-pw" not in done.stderr + done.stdout
    assert not (tmp_path / "outputs" / "sweeps").exists()


def test_a_refused_login_is_a_clear_error(postgres, tmp_path):
    agent = _agent(tmp_path, postgres.url(user="nobody"))
    assert agent.returncode == 2, agent.stderr
    assert 'role "nobody" does not exist' in agent.stderr and "Traceback" not in agent.stderr


def test_agents_of_two_machines_share_one_sweep_on_the_server(postgres, tmp_path):
    """`python -m trainer.agent ID --storage URL` on "two machines" (output roots of their own):
    real trials, each grid point once, metrics and ends recorded in the server, the password in
    no file either machine wrote."""
    from tests.sweep.store.conftest import PASSWORD
    from tests.sweep_commands import TRIAL

    config = {
        **CONFIG,
        "parameters": {"trainer.seed": {"values": [0, 1, 2, 3]}},
        "command": [*TRIAL, "trainer.max_epochs=1", "trainer.max_steps=2"],
    }
    sweep_id = "t" + uuid.uuid4().hex[:8]
    store = open_store(tmp_path / "a" / "sweeps" / sweep_id, postgres.url(), sweep_id)
    store.set("config", config)
    store.set("sweep_id", sweep_id)
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "trainer.agent", sweep_id, "--storage", postgres.url()]
            + ["--root", str(tmp_path / host), "--no-report"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for host in ("a", "b")
    ]
    outs = [agent.communicate(timeout=600)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outs
    runs = store.runs()
    assert sorted(r.params["trainer.seed"] for r in runs) == [0, 1, 2, 3]
    assert all(r.state == "finished" and r.history for r in runs)
    assert {Path(r.run_dir).parents[3].name for r in runs} <= {"a", "b"}  # <root>/sweeps/<id>/runs
    assert [p for p, text in _texts(tmp_path) if PASSWORD in text] == []


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="namespaces need root and unshare"
)
def test_a_killed_agent_of_another_host_is_lost_only_when_its_heartbeat_lapses(postgres, tmp_path):
    """An agent in UTS and PID namespaces of its own (host node-b, PID 1 there) claims a run and
    is killed with SIGKILL: here its run still looks live (its heartbeat is fresh, its PID
    means nothing on this host) until the heartbeat lapses; then it is lost and rerun here."""
    sweep_id, store = _new_sweep(postgres.url(), tmp_path / "sweep")
    other_host = ["unshare", "-u", "-p", "-f", "--mount-proc", "--kill-child", "sh", "-c"]
    other_host += ['hostname node-b && exec "$0" "$@"', sys.executable, str(CLAIMER)]
    argv = [*other_host, postgres.url(), str(tmp_path / "b"), sweep_id, "5", "hold"]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        run_id = agent.stdout.readline().strip()
        theirs = store.run(run_id)
        assert (theirs.host, theirs.agent_pid, theirs.state) == ("node-b", 1, "running")
    finally:
        agent.kill()  # kill -9: unshare's child, the agent, dies with it (--kill-child)
        agent.wait()
    assert store.mark_lost_runs() == []  # a fresh heartbeat of another host: alive
    assert _claim(store, "mine").id == "mine"  # the sweep goes on beside it
    time.sleep(1.5)
    assert store.mark_lost_runs(stale_s=1.0) == [run_id]  # silent too long: lost
    rerun = _claim(store, "again")
    assert rerun.id == run_id and rerun.losses == 1 and rerun.host == this_host()


def test_a_sweep_schema_of_an_earlier_release_gains_the_columns_added_since(postgres, tmp_path):
    sweep_id, store = _new_sweep(postgres.url(), tmp_path / "sweep")
    _claim(store, "old")
    schema = store.storage.schema
    with store.transaction() as db:  # as a release before these columns made it
        db.exec_driver_sql(f'ALTER TABLE "{schema}".runs DROP COLUMN agent_started')
        db.exec_driver_sql(f'ALTER TABLE "{schema}".runs DROP COLUMN superseded')
    store.close()
    again = open_store(tmp_path / "sweep", postgres.url(), sweep_id)
    assert [r.id for r in again.runs()] == ["old"] and not again.run("old").superseded
    assert _claim(again, "new").agent_started is not None


def test_a_reader_of_the_server_reads_and_never_writes(postgres, tmp_path):
    from sqlalchemy.exc import DBAPIError

    from tests.sweep.store.conftest import PASSWORD
    from trainer.sweep.store.opening import open_reader

    sweep_dir = tmp_path / "outputs" / "sweeps" / "s"
    sweep_id, store = _new_sweep(postgres.url(), sweep_dir)
    run = _claim(store, "a")
    store.add_metrics(run.id, [{"epoch": 1, "val/acc": 0.5}], 0)
    reader = open_reader(tmp_path / "elsewhere", postgres.url(), sweep_id)
    assert reader.run("a").history == [{"epoch": 1, "val/acc": 0.5}]
    with pytest.raises(DBAPIError, match="read-only transaction"):
        reader.update("a", state="finished")
    store.update("a", state="finished")
    assert reader.run("a").state == "finished"  # it reads what the writers commit
    assert PASSWORD not in reader.where
    assert not (tmp_path / "elsewhere").exists()
    reader.close()
    from trainer.sweep.report.dashboard.catalog import Catalog

    catalog = Catalog(tmp_path / "outputs", postgres.url(), sweep_id)  # the dashboard's
    page = catalog.page(sweep_id).json()
    assert '"id": "a"' in page and PASSWORD not in page + json.dumps(catalog.listing())
    catalog.close()
    every = Catalog(tmp_path / "outputs", postgres.url())  # no sweep named: the server's list
    listing = every.listing()
    assert sweep_id in [s["id"] for s in listing["sweeps"]] and PASSWORD not in json.dumps(listing)
    every.close()
    store.close()
