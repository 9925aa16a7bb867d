"""How a local agent starts a trial: forked from its trial template (imports already paid) when
the trial is `python -m trainer` on this interpreter and environment, else as a plain process
(`subprocess.Popen`), exactly as before. Both give the agent the same handle: pid, poll,
send_signal, kill."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from trainer.sweep.agents import cpu_share
from trainer.sweep.agents.forkable import MODULES, forkable, template_flags
from trainer.sweep.agents.template_client import ForkedTrial, TrialTemplate

__all__ = ["ENV_SWITCH", "ForkedTrial", "Trial", "TrialStarter", "TrialTemplate"]

ENV_SWITCH = "TRAINER_TRIAL_TEMPLATE"  # 0: every trial starts as a plain process


class Trial(Protocol):
    """What the agent needs of a running trial (a subset of subprocess.Popen)."""

    pid: int
    returncode: int | None  # None while it runs (as far as the last poll() knows)

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...  # TimeoutExpired if still running
    def send_signal(self, signum: int) -> None: ...
    def kill(self) -> None: ...


def _no_template() -> str:
    """Why no agent here starts a trial template, whatever its sweep ('' when it may)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"{ENV_SWITCH}=0"
    if not hasattr(os, "fork") or sys.platform != "linux":
        return "a trial template needs Linux's fork"
    return ""


class TrialStarter:
    """Starts an agent's trials: from its template while that works, else as processes (the
    agent says so once, with the reason)."""

    def __init__(
        self,
        env: dict[str, str],
        cores: tuple[int, ...],
        log_path: Path,
        modules: tuple[str, ...] = MODULES,
        command: list[str] | None = None,
    ) -> None:
        self.template: TrialTemplate | None = None
        self.noticed = False
        reason = _no_template()
        if not reason and command is not None and not forkable(command, modules):
            reason = "the sweep's command is not `python -m trainer` on this interpreter"
        if reason:
            self._notice(reason)
        else:
            flags = tuple(template_flags(command))
            self.template = TrialTemplate(env, cores, log_path, modules, flags)

    def _notice(self, reason: str) -> None:
        if not self.noticed:
            self.noticed = True
            print(
                f"agent: trials start as new processes, each paying its imports ({reason})",
                flush=True,
            )

    def wait_ready(self, stop: Callable[[], bool]) -> None:
        """Wait until the template can fork trials (at once without one), so that the agent
        claims its first run when it can start it, not a template's imports earlier; `stop`
        ends the wait (a signal to the agent)."""
        if self.template is not None and self.template.ready is None:
            self.template.wait_ready(stop=stop)

    def start(self, argv: list[str], env: dict[str, str], log: IO, cores: tuple) -> Trial:
        template = self.template
        if template is not None and template.ready is None:
            template.wait_ready()
        reason = template.usable_for(argv, env) if template is not None else ""
        if template is not None and not reason:
            try:
                return template.start(argv, env, log, cores)
            except OSError as err:
                reason = f"template failed: {err}"
        if reason:
            self._notice(reason)
        # Its own session: a terminal's Ctrl-C reaches the agent only, which forwards it once
        # (a second SIGINT would abort the trial's graceful save).
        with cpu_share.inherited_affinity(cores):  # the trial runs on its cores
            return subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def close(self) -> None:
        if self.template is not None:
            self.template.close()
