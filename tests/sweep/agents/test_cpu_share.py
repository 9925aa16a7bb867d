"""The CPUs of sweep trials: their shares and slots table-tested, the slot table with real
processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from trainer.sweep.agents import cpu_share, cpu_slots
from trainer.sweep.agents.cpu_share import CpuLimits, Share


@pytest.mark.parametrize(
    "cores, quota, slots, per_trial, expected",
    [
        ((0, 1), None, 1, None, [(2, (0, 1))]),
        ((0, 1), None, 2, None, [(1, (0,)), (1, (1,))]),
        ((0, 1, 2, 3), None, 2, None, [(2, (0, 1)), (2, (2, 3))]),
        ((0, 1, 2), None, 2, None, [(1, (0,)), (1, (1,))]),  # core 2 is left for a joiner
        ((0, 1), None, 4, None, [(1, (0,)), (1, (1,)), (1, (0,)), (1, (1,))]),  # wraps around
        ((0, 1, 2, 3), None, 2, 1, [(1, (0,)), (1, (1,))]),  # cpus_per_trial
        ((0, 1, 2, 3), None, 2, 3, [(3, (0, 1, 2)), (3, (0, 1, 3))]),  # more than fits: overlap
        ((4, 5, 6, 7), 2.0, 2, None, [(1, (4,)), (1, (5,))]),  # quota of 2 CPUs on 4 cores
    ],
)
def test_plan_shares(cores, quota, slots, per_trial, expected):
    shares = cpu_share.plan_shares(CpuLimits(cores, quota), slots, per_trial)
    assert [(s.cpus, s.cores) for s in shares] == expected
    assert [s.slot for s in shares] == list(range(slots))


def test_a_share_sizes_every_thread_pool_in_the_environment():
    env = Share(cpus=3, cores=(0, 1, 2)).env()
    assert env == {
        "TRAINER_CPU_BUDGET": "3",
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "3",
        "TORCHINDUCTOR_COMPILE_THREADS": "3",
    }


@pytest.mark.parametrize(
    "value, problem",
    [
        (None, None),
        (1, None),
        (2, None),
        (3, "more CPUs than this process may use (2: cores 0-1); set KEY to at most 2"),
        (0, "must be a positive number of CPUs per trial"),
        (-1, "must be a positive number of CPUs per trial"),
        (True, "must be a positive number of CPUs per trial"),
        ("2", "must be a positive number of CPUs per trial"),
    ],
)
def test_per_trial_problem(value, problem):
    found = cpu_share.per_trial_problem(value, CpuLimits((0, 1)), "KEY")
    if problem is None:
        assert found is None
    else:
        assert found.startswith(f"KEY={value!r}") and problem in found


def test_sweep_problems_name_the_key():
    (problem,) = cpu_share.cpus_per_trial_problems(5, CpuLimits((0, 1), 1.0))
    assert problem.startswith("hydra.sweeper.cpus_per_trial=5") and "cgroup quota 1 CPUs" in problem
    assert cpu_share.cpus_per_trial_problems(None) == []


@pytest.mark.parametrize(
    "text, slot", [("0/2", (0, 2)), ("3/4", (3, 4)), ("4/4", None), ("x/2", None), (None, None)]
)
def test_parse_slot(text, slot):
    assert cpu_share.parse_slot(text) == slot


def _held(*entries):
    return [{"cores": list(cores), "cpus": len(cores)} for cores in entries]


@pytest.mark.parametrize(
    "cores, quota, held, slot, per_trial, expected",
    [
        # started together: slot i of N takes its planned block
        ((0, 1), None, _held(), (1, 2), None, (1, (1,))),
        # its block is held by an agent that joined earlier: free cores instead
        ((0, 1, 2, 3), None, _held((2, 3)), (1, 2), None, (2, (0, 1))),
        # more agents than cores were asked for: shares rather than waits
        ((0, 1), None, _held((0,), (1,)), (2, 3), None, (1, (0,))),
        # a joiner takes the free cores only
        ((0, 1, 2), None, _held((0,), (1,)), None, None, (1, (2,))),
        ((0, 1, 2, 3), None, _held((0,)), None, 2, (2, (1, 2))),
        ((0, 1, 2, 3), None, _held(), None, None, (4, (0, 1, 2, 3))),
        # nothing free: the joiner waits
        ((0, 1), None, _held((0,), (1,)), None, None, None),
        # the cgroup quota is used up before the cores are
        ((0, 1, 2, 3), 2.0, _held((0,), (1,)), None, None, None),
        ((0, 1, 2, 3), 3.0, _held((0,), (1,)), None, 2, (1, (2,))),
    ],
)
def test_choose(cores, quota, held, slot, per_trial, expected):
    share = cpu_slots.choose(CpuLimits(cores, quota), held, slot=slot, per_trial=per_trial)
    assert (share if share is None else (share.cpus, share.cores)) == expected


@pytest.mark.slow
def test_the_slot_table_frees_a_dead_agents_cores(tmp_path):
    """A live agent's cores are not handed out again; once its process dies they are."""
    limits = CpuLimits((0, 1))
    table = cpu_slots.CpuSlots(tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        share, _ = table.claim(other.pid, slot=(0, 2), per_trial=None, limits=limits)
        assert share.cores == (0,)
        mine, others = table.claim(os.getpid(), slot=None, per_trial=None, limits=limits)
        assert mine.cores == (1,) and others == {other.pid: (0,)}
        third, _ = table.claim(1, slot=None, per_trial=None, limits=limits)
        assert third is None  # both cores held by live agents
    finally:
        other.kill()
        other.wait()
    assert table.held() == {os.getpid(): (1,)}
    table.release(os.getpid())
    assert table.held() == {}


@pytest.mark.slow
def test_a_joining_agent_waits_for_a_free_core(tmp_path, monkeypatch):
    """claim_share waits while every core is held, says so once, and stops when told to."""
    limits = cpu_share.process_limits()
    table = cpu_slots.CpuSlots(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    messages = []
    try:
        table.claim(holder.pid, slot=None, per_trial=None, limits=limits)  # holds everything
        monkeypatch.delenv("TRAINER_CPU_SLOT", raising=False)
        monkeypatch.delenv("TRAINER_CPUS_PER_TRIAL", raising=False)
        monkeypatch.setattr(cpu_slots, "WAIT_S", 0.05)
        deadline = time.monotonic() + 0.3
        share = cpu_slots.claim_share(
            tmp_path, stop=lambda: time.monotonic() > deadline, say=messages.append
        )
        assert share is None
        assert len(messages) == 1 and f"pid {holder.pid}" in messages[0]
        assert "waiting for one to end" in messages[0]
    finally:
        holder.kill()
        holder.wait()
    share = cpu_slots.claim_share(tmp_path, say=messages.append)
    assert share.cores == limits.cores
    cpu_slots.release_share(tmp_path)


def test_cpu_slots_of_another_host_take_no_core_of_this_one(tmp_path):
    """A sweep directory shared with another machine: the slots its agents hold (host node-b)
    stay in the ledger while they heartbeat, whatever their PIDs name here, and take none of
    this machine's cores; once silent they are dropped."""
    from trainer.sweep.store.liveness import Holder, this_host

    limits = CpuLimits((0, 1))
    table = cpu_slots.CpuSlots(tmp_path)
    theirs = Holder("node-b", os.getpid())  # the same PID number, on another machine
    with table.store.transaction() as db:
        table.store.hold_cpu_slot(db, theirs, (0, 1), 2)
    mine, others = table.claim(os.getpid(), slot=None, per_trial=None, limits=limits)
    assert mine.cores == (0, 1) and others == {}
    assert table.held() == {os.getpid(): (0, 1)}
    with table.store.transaction() as db:
        assert {s.holder.host for s in table.store.cpu_slots(db)} == {"node-b", this_host()}
        db.exec_driver_sql("UPDATE agent_slots SET heartbeat_at = 0 WHERE host = 'node-b'")
        assert [s.holder.host for s in table.store.cpu_slots(db)] == [this_host()]
    with table.store.reading() as db:
        rows = db.exec_driver_sql("SELECT host FROM agent_slots").fetchall()
    assert rows == [(this_host(),)]  # the silent one's row is gone
    table.release(os.getpid())


def test_a_slot_whose_pid_now_runs_another_process_is_free(tmp_path):
    """A slot records its agent's start time: the same PID with another start time (the PID
    was given to a new process) holds nothing."""
    limits = CpuLimits((0, 1))
    table = cpu_slots.CpuSlots(tmp_path)
    share, _ = table.claim(os.getpid(), slot=None, per_trial=1, limits=limits)
    assert table.held() == {os.getpid(): share.cores}
    with table.store.transaction() as db:  # as if this PID had been given to a new process
        db.exec_driver_sql(
            "UPDATE agent_slots SET started = started - 3600 WHERE pid = ?", (os.getpid(),)
        )
    assert table.held() == {}
    again, others = table.claim(os.getpid(), slot=None, per_trial=1, limits=limits)
    assert again.cores == share.cores and others == {}
    table.release(os.getpid())


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_child_started_inside_inherited_affinity_runs_on_those_cores():
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    with cpu_share.inherited_affinity((core,)):
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True,
            text=True,
            check=True,
        )
    assert child.stdout.strip() == f"[{core}]"
    assert os.sched_getaffinity(0) == before


def test_a_slotted_agent_claims_its_slots_planned_share_in_a_new_sweep(tmp_path, monkeypatch):
    """Agent i of n, started together by a sweep command, gets slot i's share of the plan."""
    monkeypatch.delenv(cpu_share.ENV_PER_TRIAL, raising=False)
    limits = cpu_share.process_limits()
    for slot in range(2):
        monkeypatch.setenv(cpu_share.ENV_SLOT, f"{slot}/2")
        share = cpu_slots.claim_share(tmp_path / str(slot), say=print)
        assert share == cpu_share.plan_shares(limits, 2, None)[slot]
        assert share.cpus == max(1, limits.count // 2)
