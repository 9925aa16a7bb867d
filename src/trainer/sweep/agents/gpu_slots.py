"""Which GPUs a local sweep's trials use: the devices the sweep may use (`hydra.sweeper.devices`:
auto or indices), how many trials share one (`trials_per_device`) or how many one trial spans
(`gpus_per_trial`, through torchrun), and a free device for each trial, chosen inside the store's
claim transaction from the running runs that hold devices on this machine (the store's slot
ledger: a run's devices are free again when it ends or its agent dies, as
trainer.sweep.store.liveness judges it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.sweep.store.liveness import this_host

if TYPE_CHECKING:
    from trainer.sweep.options import SweepOptions

ENV = "CUDA_VISIBLE_DEVICES"
# The parameters that decide what a trial compiles (architecture, input shapes, compile
# settings): a trial prefers the device whose last trial had the same ones.
COMPILE_GROUPS = ("model", "data", "compile")


def gpu_count() -> int:
    """GPUs torch sees in this process (after CUDA_VISIBLE_DEVICES); 0 without CUDA. A Linux
    machine without an NVIDIA or ROCm driver has none: no torch import (seconds) to say so."""
    drivers = ("/proc/driver/nvidia/gpus", "/dev/nvidiactl", "/dev/kfd")
    if sys.platform == "linux" and not any(os.path.exists(p) for p in drivers):
        return 0
    # lazy: torch costs 1.2 s at start-up; an agent asks it only where a GPU driver is
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible(env: Mapping[str, str] | None = None, count: int | None = None) -> list[str]:
    """This process's GPUs as CUDA_VISIBLE_DEVICES entries: its own list when it has one (an
    empty one hides every GPU), else 0..count-1."""
    env = os.environ if env is None else env
    if ENV in env:
        return [d.strip() for d in env[ENV].split(",") if d.strip()]
    return [str(i) for i in range(gpu_count() if count is None else count)]


def _indices_problem(option: Any) -> str | None:
    if isinstance(option, int) and not isinstance(option, bool):
        option = [option]
    if not isinstance(option, list | tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in option
    ):
        return (
            f"hydra.sweeper.devices={option!r} must be auto, null (no GPU assignment) or a list "
            "of GPU indices as torch numbers them here (cuda:i), e.g. [0,1]"
        )
    if len(set(option)) != len(option):
        return f"hydra.sweeper.devices={list(option)} names a GPU twice; list each once"
    return None


def resolve(
    option: Any, env: Mapping[str, str] | None = None, count: int | None = None
) -> list[str]:
    """The CUDA_VISIBLE_DEVICES entries the option names: `auto` every GPU this process sees,
    null none, indices the i-th of them (on a machine without GPUs, indices are handed out as
    they are: trials then train on the CPU). ValueError names the key and the fix."""
    if option is None or option == "none":
        return []
    seen = visible(env, count)
    if option == "auto":
        return seen
    problem = _indices_problem(option)
    if problem:
        raise ValueError(problem)
    indices = [option] if isinstance(option, int) else list(option)
    if not seen:
        return [str(i) for i in indices]
    wrong = [i for i in indices if i >= len(seen)]
    if wrong:
        raise ValueError(
            f"hydra.sweeper.devices={indices}: no GPU {wrong[0]} here, this process sees "
            f"{len(seen)} ({', '.join(f'cuda:{i}' for i in range(len(seen)))}); list those"
        )
    return [seen[i] for i in indices]


@dataclass(frozen=True)
class DevicePlan:
    """The devices a sweep's agents share and how trials use them."""

    devices: tuple[str, ...] = ()
    trials_per_device: int = RunnerConf.trials_per_device
    gpus_per_trial: int = RunnerConf.gpus_per_trial

    @property
    def slots(self) -> int:
        """Trials that can run at once (0: no devices, trials are not assigned any)."""
        return len(self.devices) * self.trials_per_device // self.gpus_per_trial

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "devices": list(self.devices)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DevicePlan:
        data = dict(data or {})
        return cls(**{**data, "devices": tuple(data.get("devices") or ())})


def _positive(options: SweepOptions, key: str) -> str | None:
    value = getattr(options, key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    default = getattr(RunnerConf, key)
    return f"hydra.sweeper.{key}={value!r} must be a positive integer (default {default})"


def sweep_plan(options: SweepOptions) -> tuple[DevicePlan | None, list[str]]:
    """The sweep's device plan from hydra.sweeper.devices, trials_per_device, gpus_per_trial
    (and agents, checked against it), or None with the problems found."""
    problems = [
        p for p in (_positive(options, k) for k in ("trials_per_device", "gpus_per_trial")) if p
    ]
    try:
        devices = resolve(options.devices)
    except ValueError as err:
        problems.append(str(err))
    if problems:
        return None, problems
    plan = DevicePlan(tuple(devices), options.trials_per_device, options.gpus_per_trial)
    return plan, _plan_problems(plan, options.agents)


def _plan_problems(plan: DevicePlan, agents: Any) -> list[str]:
    if plan.trials_per_device > 1 and plan.gpus_per_trial > 1:
        return [
            "hydra.sweeper.trials_per_device and gpus_per_trial are both above 1: a trial either "
            "shares a GPU or spans several; set one of them to 1"
        ]
    if not plan.devices and (plan.gpus_per_trial > 1 or plan.trials_per_device > 1):
        return [
            "hydra.sweeper.trials_per_device / gpus_per_trial need devices, and this machine "
            "has no GPU: list indices with hydra.sweeper.devices=[0,1] (trials then get "
            "CUDA_VISIBLE_DEVICES and train on the CPU) or leave them at 1"
        ]
    if plan.gpus_per_trial > len(plan.devices) > 0:
        return [
            f"hydra.sweeper.gpus_per_trial={plan.gpus_per_trial} needs that many devices; "
            f"hydra.sweeper.devices gives {len(plan.devices)} ({','.join(plan.devices)})"
        ]
    if isinstance(agents, int) and plan.slots and agents > plan.slots:
        return [
            f"hydra.sweeper.agents={agents} is more than the {plan.slots} trial(s) the devices "
            f"hold at once ({len(plan.devices)} device(s) x trials_per_device="
            f"{plan.trials_per_device} / gpus_per_trial={plan.gpus_per_trial}); leave agents "
            "unset (one per slot) or raise hydra.sweeper.trials_per_device"
        ]
    return []


def agent_count(agents: Any, plan: DevicePlan | None) -> int:
    """Agents a sweep command starts: as asked, else one per device slot, else one."""
    if agents is not None:
        return agents
    return plan.slots if plan is not None and plan.slots else 1


def free_memory(device: str) -> tuple[float, float] | None:
    """(free, total) MiB of the GPU a CUDA_VISIBLE_DEVICES entry names, from nvidia-smi (no CUDA
    context in the agent); None without nvidia-smi or that GPU."""
    if not shutil.which("nvidia-smi"):
        return None
    query = ["nvidia-smi", f"--id={device}", "--query-gpu=memory.free,memory.total"]
    try:
        out = subprocess.run(
            [*query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        free, total = (float(x) for x in out.strip().splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return free, total


def signature(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters that decide what a trial compiles (see COMPILE_GROUPS)."""
    return {k: v for k, v in (params or {}).items() if k.split(".")[0] in COMPILE_GROUPS}


class DevicePool:
    """One agent's view of the sweep's devices: which of its devices are free now (from the
    running runs of this machine whose agents live) and which to give the next trial."""

    def __init__(self, plan: DevicePlan, allowed: tuple[str, ...] | None = None) -> None:
        self.plan = plan
        self.allowed = plan.devices if allowed is None else allowed
        self.host = this_host()

    def usage(self, runs: list[Any]) -> dict[str, int]:
        """Trials now running on each device of this machine."""
        used = {d: 0 for d in self.plan.devices}
        for run in runs:
            if run.state != "running" or run.host != self.host or not run.agent.alive():
                continue
            for device in run.devices or ():
                used[device] = used.get(device, 0) + 1
        return used

    def _free(self, runs: list[Any]) -> list[str]:
        used = self.usage(runs)
        if self.plan.gpus_per_trial > 1:  # a multi-GPU trial has its devices to itself
            return [d for d in self.allowed if used.get(d, 0) == 0]
        return [
            d
            for d in self.allowed
            if used.get(d, 0) == 0
            or (used[d] < self.plan.trials_per_device and self.memory_allows(d))
        ]

    def memory_allows(self, device: str) -> bool:
        """Whether a GPU that already runs a trial has room for one more: free memory of at
        least its share (total / trials_per_device); True where it cannot be read (no GPU)."""
        reading = free_memory(device)
        if reading is None:
            return True
        free, total = reading
        return free >= 0.9 * total / self.plan.trials_per_device

    def available(self, runs: list[Any]) -> bool:
        return len(self._free(runs)) >= self.plan.gpus_per_trial

    def choose(self, runs: list[Any], params: Mapping[str, Any] | None) -> list[str] | None:
        """Devices for a trial with these parameters: the least loaded free ones, a device whose
        last trial compiled the same (signature) first; None when too few are free."""
        free = self._free(runs)
        if len(free) < self.plan.gpus_per_trial:
            return None
        wanted, last = signature(params), {}
        for run in sorted(runs, key=lambda r: r.started_at or 0):
            for device in run.devices or ():
                last[device] = signature(run.params)
        used = self.usage(runs)
        free.sort(key=lambda d: (used.get(d, 0), last.get(d) != wanted, self.allowed.index(d)))
        return free[: self.plan.gpus_per_trial]


def devices_env(devices: list[str] | None) -> dict[str, str]:
    """The variable that gives a trial its devices (none when the sweep assigns none)."""
    return {ENV: ",".join(devices)} if devices else {}


def agent_pool(
    stored: Mapping[str, Any] | None, devices: list[str] | None = None, say=print
) -> DevicePool | None:
    """An agent's pool: the sweep's plan (stored when it was created), its devices narrowed to
    `devices` (the agent's --devices) when given; None when the sweep assigns no devices. Says
    once when this machine has no GPU, so trials train on the CPU."""
    plan = DevicePlan.from_dict(stored)
    if devices:
        plan = DevicePlan(tuple(devices), plan.trials_per_device, plan.gpus_per_trial)
    if not plan.devices:
        return None
    if gpu_count() == 0:
        say(
            f"agent: no GPU here: trials get {ENV}={','.join(plan.devices[: plan.gpus_per_trial])}"
            " and the like, as on a GPU machine, and train on the CPU"
        )
    return DevicePool(plan)


def fixed_slots(plan: DevicePlan | None) -> list[list[str]]:
    """The devices of each slot, for agents that keep theirs (`wandb agent`): slot i of
    trials_per_device K runs on device i // K; of gpus_per_trial N, on devices iN..iN+N-1."""
    if plan is None or not plan.devices:
        return []
    n, k = plan.gpus_per_trial, plan.trials_per_device
    return [
        list(plan.devices[(i // k) * n : (i // k) * n + n]) if n > 1 else [plan.devices[i // k]]
        for i in range(plan.slots)
    ]
