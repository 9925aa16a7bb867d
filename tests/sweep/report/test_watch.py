"""`python -m trainer.sweep watch SWEEP` follows a sweep until it ends and then leaves its whole
report; `--root`/`--storage` go before or after the subcommand."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from trainer.sweep.__main__ import _parser
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.report.watch import unattended
from trainer.sweep.search import classic
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id

GRID = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"lr": {"values": [0.1, 0.2]}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
}


def _claim(store, agent_pid=None):
    return store.claim(
        lambda runs: classic.next_params(store.config, runs),
        new_id=new_id,
        agent_pid=os.getpid() if agent_pid is None else agent_pid,
    )


def test_storage_and_root_go_before_or_after_the_subcommand():
    for argv in (
        ["--storage", "postgresql://h/db", "ls"],
        ["ls", "--storage", "postgresql://h/db"],
        ["--root", "r", "watch", "s1", "--storage", "postgresql://h/db"],
    ):
        args = _parser().parse_args(argv)
        assert args.storage == "postgresql://h/db", argv
    assert _parser().parse_args(["show", "s1", "--root", "elsewhere"]).root == "elsewhere"
    assert _parser().parse_args(["ls"]).storage is None


def test_watch_follows_the_sweep_until_it_ends_then_writes_its_report(tmp_path, capsys):
    store = SweepStore(tmp_path / "sweeps" / "s1" / "sweep.db")
    store.set("config", GRID)
    store.set("sweep_id", "s1")
    store.set("state", "running")  # its command is gone; its agents go on
    first = _claim(store)
    store.add_metrics(first.id, [{"epoch": 1, "val/acc": 0.5}], 0)

    def agents() -> None:  # the rest of the sweep, while watch looks
        time.sleep(0.3)
        store.add_metrics(first.id, [{"epoch": 2, "val/acc": 0.75}], 1)
        # a second agent (a live process) takes the last run before the first one's ends: the
        # test registers no agent's heartbeat, so a moment with no run going would end watch
        second = _claim(store, agent_pid=os.getppid())
        store.update(first.id, state="finished")
        store.add_metrics(second.id, [{"epoch": 1, "val/acc": 0.625}], 0)
        store.update(second.id, state="finished")

    thread = threading.Thread(target=agents)
    thread.start()
    assert sweep_cli(["--root", str(tmp_path), "watch", "s1", "--every", "0.1"]) == 0
    thread.join()
    out = capsys.readouterr().out
    assert f"{first.id} running: epoch 1 val/acc=0.5" in out
    assert "2 run(s): 2 finished" in out and "best val/acc=0.75" in out
    folder = tmp_path / "sweeps" / "s1"
    assert (folder / "results.json").is_file() and (folder / "best.yaml").is_file()
    assert (folder / "sweep.png").is_file()
    assert store.get("state") == "finished"  # said by whoever ended last


def test_watch_says_when_no_agent_is_left_to_take_the_runs(tmp_path, capsys):
    """Its agent gone (a dead process, no live agent anywhere): watch says how to resume the
    sweep instead of waiting in silence; once an agent takes the run again the line goes."""
    store = SweepStore(tmp_path / "sweeps" / "s1" / "sweep.db")
    store.set("config", GRID)
    store.set("sweep_id", "s1")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lost = store.claim(
        lambda runs: classic.next_params(store.config, runs), new_id=new_id, agent_pid=dead.pid
    )
    runs = store.runs()
    assert unattended(store, runs)

    def agent() -> None:  # an agent comes back: it resumes the lost run, then ends the sweep
        time.sleep(0.5)
        while (r := _claim(store)) is not None:
            store.update(r.id, state="finished")

    thread = threading.Thread(target=agent)
    thread.start()
    assert sweep_cli(["--root", str(tmp_path), "watch", "s1", "--every", "0.1"]) == 0
    thread.join()
    out = capsys.readouterr().out
    assert f"no agent runs it now: python -m trainer.agent {tmp_path / 'sweeps' / 's1'}" in out
    assert not unattended(store, store.runs())
    assert store.run(lost.id).state == "finished" and store.run(lost.id).losses == 1
