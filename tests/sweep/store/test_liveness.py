"""One liveness for runs, slots and the lease: a holder of this host lives while its process
(PID and start time) runs, one of another host while its heartbeat is fresh. The two-host case
runs a real second process in its own PID and UTS namespace (`unshare`, as root)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trainer.hardware.cpu_limits import process_limits
from trainer.sweep.agents.cpu_slots import CpuSlots
from trainer.sweep.search import classic
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id
from trainer.sweep.store.liveness import START_SLACK_S, Holder, pid_alive, this_host

GRID = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"a": {"values": [1, 2, 3, 4]}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
}
UNSHARE = ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child"]


@functools.cache
def _namespaces_problem() -> str | None:
    """Why this test cannot start a process in its own PID and UTS namespace, or None."""
    if not sys.platform.startswith("linux"):
        return "PID and UTS namespaces are Linux's"
    if os.geteuid() != 0:
        return "unshare --uts --pid needs root"
    if shutil.which("unshare") is None:
        return "no unshare command here (util-linux)"
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"unshare fails here: {probe.stderr.strip()[-300:]}"
    return None


@pytest.fixture
def namespaces():
    problem = _namespaces_problem()
    if problem:
        pytest.skip(f"needs a second process in its own PID and UTS namespace: {problem}")


def _in_namespace(script: str, *args: str, host: str = "node-b", pid: int | None = None):
    """`python -c script args` in new PID and UTS namespaces whose hostname is `host`, with
    PID `pid` there when given (the namespace's next PID is set, root may)."""
    boot = (
        "import socket, subprocess, sys\n"
        "socket.sethostname(sys.argv[1])\n"
        "if sys.argv[2] != '-':\n"
        "    try:\n"
        "        open('/proc/sys/kernel/ns_last_pid', 'w').write(str(int(sys.argv[2]) - 1))\n"
        "    except OSError:\n"
        "        pass\n"
        "sys.exit(subprocess.call([sys.executable, '-c', *sys.argv[3:]]))\n"
    )
    argv = [*UNSHARE, sys.executable, "-c", boot, host, str(pid or "-"), script, *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _absent_pid() -> int:
    """A PID no process of this host has."""
    return max(psutil.pids()) + 1000


def test_a_holder_of_this_host_lives_while_its_process_does():
    me = Holder.of()
    assert me.here and me.is_me and me.alive() and me.started == psutil.Process().create_time()
    assert not Holder(this_host(), _absent_pid()).alive()
    assert not Holder(this_host(), None).alive()
    assert Holder(None, os.getpid()).alive()  # recorded before hosts were: this host's, by PID
    # The heartbeat does not decide a holder of this host: its process table does.
    assert Holder(this_host(), os.getpid(), me.started, heartbeat=0.0).alive()


def test_the_same_pid_with_another_start_time_reads_as_dead():
    """A PID given to a new process: the start time recorded with it tells them apart."""
    started = psutil.Process().create_time()
    assert pid_alive(os.getpid(), started)
    assert not pid_alive(os.getpid(), started + 2 * START_SLACK_S)
    assert not Holder(this_host(), os.getpid(), started - 3600).alive()
    assert pid_alive(os.getpid())  # no start time recorded (an older store): the PID decides


def test_a_holder_of_another_host_lives_while_its_heartbeat_is_fresh():
    now = time.time()
    mine = os.getpid()  # the same PID number on another machine is another process
    assert Holder("node-b", mine, None, heartbeat=now - 5).alive(stale_s=120, now=now)
    assert not Holder("node-b", mine, None, heartbeat=now - 200).alive(stale_s=120, now=now)
    assert not Holder("node-b", mine, None, heartbeat=None).alive()
    assert Holder("node-b", _absent_pid(), None, heartbeat=now).alive(now=now)
    assert not Holder("node-b", mine).here and not Holder("node-b", mine).is_me


REUSE = """
import json, os, subprocess, time
from trainer.sweep.store.liveness import Holder, START_SLACK_S, pid_alive
first = subprocess.Popen(["sleep", "60"])
record = Holder.of(first.pid)
first.kill()
first.wait()
time.sleep(START_SLACK_S + 0.5)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(first.pid - 1))  # the namespace's next process gets the same PID
second = subprocess.Popen(["sleep", "60"])
print(json.dumps({
    "same_pid": second.pid == first.pid,
    "recorded_alive": record.alive(),
    "pid_alone_alive": pid_alive(second.pid),
    "new_alive": Holder.of(second.pid).alive(),
}), flush=True)
second.kill()
second.wait()
"""


@pytest.mark.slow
def test_a_reused_pid_reads_as_dead_with_real_processes(namespaces):
    """In a PID namespace of its own, a process dies and its PID is given to a new one: the
    record of the first (PID and start time) reads as dead, the second as alive."""
    proc = _in_namespace(REUSE)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {
        "same_pid": True,
        "recorded_alive": False,
        "pid_alone_alive": True,
        "new_alive": True,
    }


NODE_B = """
import json, os, socket, sys, time
from trainer.hardware.cpu_limits import process_limits
from trainer.sweep.agents.cpu_slots import CpuSlots
from trainer.sweep.search import classic
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id
store = SweepStore(sys.argv[1])
share, _ = CpuSlots(store).claim(os.getpid(), slot=None, per_trial=None, limits=process_limits())
run = store.claim(lambda runs: classic.next_params(store.config, runs), new_id=new_id,
                  agent_pid=os.getpid())
store.update(run.id, pid=os.getpid())
print(json.dumps({"run": run.id, "host": socket.gethostname(), "cores": list(share.cores)}),
      flush=True)
while True:  # the agent trains: it heartbeats until it is killed
    store.heartbeat(run.id)
    time.sleep(0.2)
"""


def _claim_here(store: SweepStore):
    return store.claim(
        lambda runs: classic.next_params(store.config, runs),
        new_id=new_id,
        agent_pid=os.getpid(),
        rerun_crashed=True,
    )


@pytest.mark.slow
def test_an_agent_of_another_host_keeps_its_run_while_it_heartbeats(tmp_path, namespaces):
    """Host node-b (a process in its own PID and UTS namespace, sharing the sweep directory)
    claims a run and a CPU slot and heartbeats. An agent here checks for lost runs again and
    again and runs the rest of the grid: node-b's run is never marked lost, its point never
    run twice, its slot takes none of this machine's cores. Once node-b dies and its heartbeat
    lapses, its run is lost and rerun here."""
    stale_s = 2.0
    store = SweepStore(tmp_path / "sweep.db")
    store.set("config", GRID)
    node_b = _in_namespace(NODE_B, str(store.path), pid=_absent_pid())
    try:
        said = json.loads(node_b.stdout.readline())
        theirs = store.run(said["run"])
        assert said["host"] == theirs.host == "node-b" != this_host()
        assert not pid_alive(theirs.agent_pid, theirs.agent_started)  # by PID here: "dead"
        mine, others = CpuSlots(store).claim(
            os.getpid(), slot=None, per_trial=None, limits=process_limits()
        )
        assert mine.cores == tuple(said["cores"]) == process_limits().cores and others == {}
        deadline = time.monotonic() + 2.5 * stale_s  # past the stale limit: the heartbeat holds it
        while time.monotonic() < deadline:
            assert store.mark_lost_runs(stale_s=stale_s) == []
            run = _claim_here(store)
            if run is not None:
                store.update(run.id, state="finished")
            time.sleep(0.2)
        assert node_b.poll() is None and store.run(theirs.id).state == "running"
        assert len(store.runs()) == 4  # one run per grid point
    finally:
        node_b.kill()
        node_b.wait()
    time.sleep(stale_s + 0.5)  # node-b is gone: its heartbeat lapses
    assert store.mark_lost_runs(stale_s=stale_s) == [theirs.id]
    with store.transaction() as db:
        assert {s.holder.host for s in store.cpu_slots(db, stale_s=stale_s)} == {this_host()}
    rerun = _claim_here(store)
    assert rerun.id == theirs.id and rerun.losses == 1 and rerun.host == this_host()
    store.update(rerun.id, state="finished")
    assert _claim_here(store) is None
    live = sorted(r.params["a"] for r in store.runs() if not r.superseded)
    assert live == [1, 2, 3, 4]
    CpuSlots(store).release(os.getpid())


def test_kill_orphan_acts_on_this_hosts_processes_only():
    from trainer.sweep.store.liveness import kill_orphan

    assert not kill_orphan(os.getpid(), "not-this-run")  # not the run's trial: left alone
    assert not kill_orphan(os.getpid(), "x", host="node-b")
    assert not kill_orphan(_absent_pid(), "x")
    assert Path(f"/proc/{os.getpid()}").exists()
