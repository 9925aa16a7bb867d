"""The CPUs a run may use (affinity, cgroup quota) and the thread pools and DataLoader workers it
sizes from them: pure functions table-tested."""

from __future__ import annotations

import os

import pytest

from tests.conftest import make_cfg
from trainer.config.schema import ConfigError
from trainer.hardware import cpu_limits, threads
from trainer.hardware.cpu_limits import CpuLimits
from trainer.preflight import validate


@pytest.mark.parametrize(
    "text, cores",
    [
        ("0", (0,)),
        ("0-3", (0, 1, 2, 3)),
        ("0-1,4,6-7", (0, 1, 4, 6, 7)),
        ("5,2, 3", (2, 3, 5)),
        ("", ()),
    ],
)
def test_cpu_lists_parse_and_format_back(text, cores):
    assert cpu_limits.parse_cpu_list(text) == cores
    assert cpu_limits.parse_cpu_list(cpu_limits.format_cpu_list(cores)) == cores


def test_format_cpu_list_uses_ranges():
    assert cpu_limits.format_cpu_list([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9"


def _write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    "cgroup, files, expected",
    [
        # cgroup v2: the process's own cgroup, or a tighter ancestor
        ("0::/job\n", {"cgroup.controllers": "cpu", "job/cpu.max": "200000 100000\n"}, 2.0),
        ("0::/job\n", {"cgroup.controllers": "cpu", "job/cpu.max": "max 100000\n"}, None),
        (
            "0::/a/b\n",
            {
                "cgroup.controllers": "cpu",
                "a/cpu.max": "150000 100000\n",
                "a/b/cpu.max": "400000 100000\n",
            },
            1.5,
        ),
        # a container sees its own cgroup as the root
        ("0::/\n", {"cgroup.controllers": "cpu", "cpu.max": "50000 100000\n"}, 0.5),
        # cgroup v1: cpu,cpuacct or cpu mounts
        (
            "4:cpu,cpuacct:/slurm/job1\n0::/\n",
            {
                "cpu,cpuacct/slurm/job1/cpu.cfs_quota_us": "300000\n",
                "cpu,cpuacct/slurm/job1/cpu.cfs_period_us": "100000\n",
            },
            3.0,
        ),
        (
            "3:cpu:/\n",
            {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
            None,
        ),
        ("", {}, None),
    ],
)
def test_cgroup_cpu_quota(tmp_path, cgroup, files, expected):
    _write(tmp_path, files)
    assert cpu_limits.cgroup_cpu_quota(cgroup, root=tmp_path) == expected


@pytest.mark.parametrize(
    "cores, quota, count",
    [
        ((0, 1), None, 2),
        ((0, 1, 2, 3), 2.0, 2),
        ((0, 1, 2, 3), 1.5, 2),
        ((0, 1), 0.5, 1),
        ((), None, 1),
    ],
)
def test_limits_count_the_affinity_and_the_quota(cores, quota, count):
    assert CpuLimits(cores, quota).count == count


def test_this_process_limits_are_its_affinity():
    limits = cpu_limits.process_limits()
    assert set(limits.cores) == os.sched_getaffinity(0)
    assert 1 <= limits.count <= len(limits.cores)


@pytest.mark.parametrize(
    "requested, cpus, workers", [(0, 4, 0), (2, 4, 2), (8, 4, 3), (2, 1, 0), (1, 2, 1)]
)
def test_worker_budget_leaves_a_cpu_for_training(requested, cpus, workers):
    assert threads.worker_budget(requested, cpus) == workers


@pytest.mark.parametrize(
    "num_threads, num_workers, cpus, from_agent, expected",
    [
        ("auto", 0, 2, False, (2, 0, "process CPUs")),
        ("auto", 0, 1, True, (1, 0, "agent share")),
        ("auto", 2, 4, True, (2, 2, "agent share")),  # workers and threads share the CPUs
        ("auto", 4, 2, False, (1, 1, "process CPUs")),
        (1, 0, 8, False, (1, 0, "trainer.num_threads")),
        (6, 0, 2, True, (6, 0, "trainer.num_threads")),  # explicit wins over the share
    ],
)
def test_plan_threads(num_threads, num_workers, cpus, from_agent, expected):
    plan = threads.plan_threads(num_threads, num_workers, cpus, from_agent)
    assert (plan.threads, plan.workers, plan.source) == expected
    assert plan.interop_threads == plan.threads and plan.budget == cpus


@pytest.mark.parametrize(
    "num_threads, from_agent, outside, expected",
    [
        ("auto", False, 1, (1, "OMP_NUM_THREADS")),  # torchrun, a batch script
        ("auto", True, 4, (2, "agent share")),  # the agent's share wins
        (3, False, 1, (3, "trainer.num_threads")),  # and the key wins over both
        ("auto", False, None, (2, "process CPUs")),
    ],
)
def test_an_outside_omp_num_threads_sizes_an_auto_run(num_threads, from_agent, outside, expected):
    plan = threads.plan_threads(num_threads, 0, 2, from_agent, outside)
    assert (plan.threads, plan.source) == expected


def test_the_budget_comes_from_the_agent_when_it_set_one(monkeypatch):
    monkeypatch.setenv("TRAINER_CPU_BUDGET", "1")
    assert threads.budget(CpuLimits((0, 1, 2, 3))) == 1
    assert threads.cap_workers(4) == 0
    monkeypatch.delenv("TRAINER_CPU_BUDGET")
    assert threads.budget(CpuLimits((0, 1, 2, 3))) == 4


@pytest.mark.parametrize("value", [0, -2, "many", 1.5])
def test_num_threads_is_checked_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"trainer\.num_threads=.* must be auto"):
        validate(make_cfg(f"trainer.num_threads={value}"))


def test_num_threads_accepts_auto_and_a_count():
    assert validate(make_cfg()).trainer.num_threads == "auto"
    assert validate(make_cfg("trainer.num_threads=3")).trainer.num_threads == 3
