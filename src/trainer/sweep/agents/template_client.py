"""The agent's end of a trial template (`trainer.sweep.agents.template`): the template process,
the requests that fork trials from it, the reports of their exits, and the trials' handles."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from trainer.sweep.agents import cpu_share
from trainer.sweep.agents.forkable import MODULES, env_difference, without_env
from trainer.sweep.agents.template import receive, receive_nowait, send
from trainer.sweep.store.liveness import pid_alive

READY_TIMEOUT_S = 300.0  # imports on a loaded machine; after that, trials start as processes


class ForkedTrial:
    """A trial forked by the template: signals go to its PID, its exit code comes from the
    template that reaps it."""

    def __init__(self, template: TrialTemplate, pid: int) -> None:
        self.template = template
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.template.pump()
        if self.returncode is None and self.template.dead and not pid_alive(self.pid):
            # Its template died first: nobody can tell the exit code; report a crash.
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once the template reports it; Popen.wait's TimeoutExpired contract."""
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while (code := self.poll()) is None:
            if (left := deadline - time.monotonic()) <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            self.template.readable(min(left, 1.0))  # a report (or the template's end) wakes it
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it has just ended: poll() says how
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class TrialTemplate:
    """The agent's end of one template process (`trainer.sweep.agents.template`)."""

    def __init__(
        self,
        env: dict[str, str],
        cores: tuple[int, ...],
        log_path: Path,
        modules: tuple[str, ...] = MODULES,
        flags: tuple[str, ...] = (),
    ) -> None:
        """Start the template with this environment, on `cores`; its output goes to
        `log_path`."""
        self.env = dict(env)
        self.modules = modules
        self.cwd = os.getcwd()
        self.dead = False
        self.trials: dict[int, ForkedTrial] = {}
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log, cpu_share.inherited_affinity(cores):
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainer.sweep.agents.template",
                    str(theirs.fileno()),
                    *flags,  # imports it may skip (forkable.template_flags)
                ],
                env=self.env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C is the agent's to forward
            )
        theirs.close()
        self.ready: bool | None = None  # None: still importing
        self.set_by_imports: dict[str, str] = {}  # environment defaults its imports set
        self.problem = ""

    def wait_ready(
        self, timeout: float = READY_TIMEOUT_S, stop: Callable[[], bool] = lambda: False
    ) -> bool:
        """Block until the template has imported everything (True) or failed (False); `stop`,
        asked about once a second, ends the wait early (False, and the template stays)."""
        deadline = time.monotonic() + timeout
        while self.ready is None and not self.dead and not stop():
            left = deadline - time.monotonic()
            if left <= 0:
                self.problem = f"was not ready after {timeout:g} s"
                return False
            self._sock.settimeout(min(left, 1.0))
            try:
                self._handle(*receive(self._sock))
            except TimeoutError:
                continue
            finally:
                self._sock.settimeout(None)
        return bool(self.ready)

    def usable_for(self, argv: list[str], env: dict[str, str]) -> str:
        """Why this trial cannot be forked from the template ('' when it can)."""
        code = self.process.poll()
        if code is not None and not self.dead:
            self.dead = True
            self.problem = self.problem or f"ended (exit code {code})"
        if self.dead or not self.ready:
            return f"the trial template {self.problem or 'ended'}"
        body = without_env(argv)
        if (
            len(body) < 3
            or body[0] != sys.executable
            or body[1] != "-m"
            or body[2] not in self.modules
        ):
            return "the sweep's command is not `python -m trainer` on this interpreter"
        differ = env_difference(self.env, env, self.set_by_imports)
        if differ:
            return f"the trial's environment differs from the agent's in {', '.join(differ)}"
        if os.getcwd() != self.cwd:
            return "the agent changed its working directory"
        return ""

    def start(self, argv: list[str], env: dict[str, str], log: IO, cores: tuple) -> ForkedTrial:
        """Fork `[env] python -m MODULE args...` (see usable_for) with this environment, its
        output to `log`, on `cores`."""
        body = without_env(argv)
        request = {
            "module": body[2],
            "args": body[3:],
            "env": env,
            "cwd": self.cwd,
            "cores": list(cores),
        }
        send(self._sock, request, [log.fileno()])
        while True:  # the reply to this request comes before any later exit report
            message, fds = receive(self._sock)
            if message is None or "started" in message:
                break
            self._handle(message, fds)
        if message is None:
            self.dead = True
            raise OSError("the trial template ended while starting a trial")
        trial = ForkedTrial(self, message["started"])
        self.trials[trial.pid] = trial
        return trial

    def readable(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for a report from the template (pump reads it)."""
        if self.dead:  # nothing will come: a trial it left is watched through its PID
            time.sleep(timeout)
        else:
            select.select([self._sock], [], [], timeout)

    def pump(self) -> None:
        """Read what the template reported (trials that ended) without blocking."""
        while not self.dead:
            try:
                message, fds = receive_nowait(self._sock)
            except BlockingIOError:
                return
            self._handle(message, fds)

    def _handle(self, message: dict | None, fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)
        if message is None:
            self.dead = True
            self.problem = self.problem or f"ended (exit code {self.process.poll()})"
        elif "ready" in message:
            self.ready, self.set_by_imports = True, message.get("set_by_imports") or {}
        elif "error" in message:
            self.ready, self.problem = False, message["error"]
        elif "exited" in message and message["exited"] in self.trials:
            self.trials.pop(message["exited"]).returncode = message["code"]

    def close(self) -> None:
        """End the template (running trials live on, as plain processes' would)."""
        self._sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
