"""Whether a sweep's agent lives, one answer for the runs, the slots and the optimizer lease: a
holder is recorded as host, PID, process start time and heartbeat. On its own host a holder lives
while the process table says so (psutil: the PID runs, with the start time recorded, and is no
zombie; a reused PID reads as dead). A holder of another host, whose PIDs mean nothing here, lives
while its heartbeat is fresh. And the end of a lost run's orphaned trial, on this host only."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import psutil

STALE_S = 120.0  # a heartbeat older than this: the holder is silent (gone, if of another host)
# One process's start time, read twice, differs by what the wall clock was slewed in between
# (psutil adds the boot time to the ticks since boot); a reused PID starts later than that.
START_SLACK_S = 1.0


def this_host() -> str:
    return socket.gethostname()


def start_time(pid: int | None) -> float | None:
    """When process `pid` of this host started (seconds since the epoch), or None when it does
    not run (or is a zombie)."""
    if pid is None or pid <= 0:
        return None
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return process.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def pid_alive(pid: int | None, started: float | None = None) -> bool:
    """Whether process `pid` of this host runs and is not a zombie (an agent killed while its
    parent died too lingers as one until it is reaped); with `started`, whether it is still the
    process that started then (not another one given the same PID)."""
    if pid is None or pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        return started is None or abs(process.create_time() - started) <= START_SLACK_S
    except psutil.NoSuchProcess:  # gone (psutil.ZombieProcess is one too)
        return False
    except psutil.AccessDenied:  # exists, owned by someone else
        return True


@dataclass(frozen=True)
class Holder:
    """Who holds a run, a CPU slot or the optimizer lease: a process of some host."""

    host: str | None  # None: recorded before hosts were, judged as one of this host (as then)
    pid: int | None
    started: float | None = None  # psutil's create_time; None: not recorded (older stores)
    heartbeat: float | None = None  # when it last said it lives (time.time())

    @classmethod
    def of(cls, pid: int | None = None, heartbeat: float | None = None) -> Holder:
        """Process `pid` of this host (this process by default) as it runs now."""
        pid = os.getpid() if pid is None else pid
        return cls(this_host(), pid, start_time(pid), heartbeat)

    @property
    def here(self) -> bool:
        """Of this host: its PID means something here."""
        return self.host is None or self.host == this_host()

    @property
    def is_me(self) -> bool:
        return self.here and self.pid == os.getpid()

    def fresh(self, stale_s: float = STALE_S, now: float | None = None) -> bool:
        """Its heartbeat is at most `stale_s` old."""
        now = time.time() if now is None else now
        return self.heartbeat is not None and now - self.heartbeat <= stale_s

    def silent(self, stale_s: float = STALE_S, now: float | None = None) -> bool:
        """It has a heartbeat, older than `stale_s`."""
        return self.heartbeat is not None and not self.fresh(stale_s, now)

    def alive(self, stale_s: float = STALE_S, now: float | None = None) -> bool:
        """Of this host: its process runs (PID and start time, no zombie). Of another host: its
        heartbeat is fresh; never judged by a PID of this host."""
        if self.here:
            return pid_alive(self.pid, self.started)
        return self.fresh(stale_s, now)


def _is_trial_of(process: psutil.Process, run_id: str) -> bool:
    """Whether `process` is still this run's trial (a PID may be reused): its command line names
    the run's directory (a plain process), or its output goes to the run's log (forked from a
    trial template, whose command line it shares)."""
    if any(f"/runs/{run_id}" in part for part in process.cmdline()):
        return True
    return any(f.fd == 1 and f.path.endswith(f"/logs/{run_id}.log") for f in process.open_files())


def kill_orphan(pid: int | None, run_id: str, host: str | None = None) -> bool:
    """SIGKILL a lost run's trial process if it still runs (its agent died under it); never a
    process of another host (`host`: the run's). Whether it was killed."""
    if pid is None or pid <= 0 or not Holder(host, pid).here:
        return False
    try:
        process = psutil.Process(pid)
        if not _is_trial_of(process, run_id):
            return False
        process.kill()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return True
