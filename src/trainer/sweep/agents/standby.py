"""The agents a local sweep command starts before it checks the sweep (`python -m trainer.agent
--standby`): their trial templates import torch while the command validates, so the first
trial starts as the sweep is created. Light imports: the sweeper plugin uses this first."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer import cpu_share
from trainer.sweep.agents import gpu_slots


def agent_env(root: Path, slot: int, slots: int, cpus_per_trial: int | None) -> dict[str, str]:
    """Agent `slot` of the `slots` a sweep command starts together: its CPU slot, its root."""
    return {
        **os.environ,
        "TRAINER_OUTPUT_DIR": str(root),
        **cpu_share.slot_env(slot, slots, cpus_per_trial),
    }


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Processes started in this block ignore SIGINT from their first instruction (an ignored
    signal stays ignored across exec) until they choose otherwise."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class StandbyAgents:
    """The local agents of a sweep command, started before its checks (`trainer.agent
    --standby`): their trial templates import torch while the command validates, so the first
    trial starts when the sweep does. `start` hands them the sweep; `cancel` (no sweep: bad
    input, Ctrl-C) ends them, having written nothing."""

    def __init__(
        self, count: int, root: Path, cpus_per_trial: int | None, flags: list[str]
    ) -> None:
        self.plan = (count, Path(root).resolve(), cpus_per_trial)
        argv = [sys.executable, "-m", "trainer.agent", "--standby", *flags]
        with _sigint_ignored():  # inherited: a Ctrl-C before the go is the command's alone
            self.procs = [
                subprocess.Popen(
                    argv,
                    env=agent_env(self.plan[1], i, count, cpus_per_trial),
                    stdin=subprocess.PIPE,
                )
                for i in range(count)
            ]

    def start(
        self, argv: list[str], count: int, root: Path, cpus_per_trial: int | None
    ) -> list[subprocess.Popen] | None:
        """Run them as `argv` (python -m trainer.agent ...), when they were started for these
        `count`, `root` and `cpus_per_trial` (else end them: None)."""
        if self.plan != (count, Path(root).resolve(), cpus_per_trial):
            self.cancel()
            return None
        line = json.dumps(argv[3:]) + "\n"  # the arguments after `python -m trainer.agent`
        procs, self.procs = self.procs, []
        for proc in procs:
            with contextlib.suppress(BrokenPipeError):  # it died: its exit code tells
                proc.stdin.write(line.encode())
                proc.stdin.close()
        return procs

    def cancel(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        for proc in procs:
            proc.wait()


def standby_agents(options: dict[str, Any], root: Path, flags: list[str]) -> StandbyAgents | None:
    """The local agents of a sweep command (hydra.sweeper options), started now; None for a
    dry run, the server backend, or where their number is not known before the checks
    (`agents: null` on a machine that may have GPUs)."""
    if options["backend"] != "local" or options["dry_run"]:
        return None
    agents = options.get("agents")
    if agents is None and gpu_slots.surely_no_devices(options.get("devices", "auto")):
        agents = 1
    if not isinstance(agents, int) or isinstance(agents, bool) or agents < 1:
        return None
    per_trial = options.get("cpus_per_trial")
    per_trial = per_trial if isinstance(per_trial, int) and per_trial > 0 else None
    return StandbyAgents(agents, root, per_trial, flags)
