"""Whether a run's agent process lives, and the end of a lost run's orphaned trial."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:  # a killed agent whose parent died too may linger as a zombie until it is reaped
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): trust the signal check
    return state not in ("Z", "X")


def _is_trial_of(pid: int, run_id: str) -> bool:
    """Whether `pid` is still this run's trial (a PID may be reused): its command line names the
    run's directory (a plain process), or its output goes to the run's log (forked from a trial
    template, whose command line it shares)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    if f"/runs/{run_id}" in cmdline:
        return True
    try:
        return os.readlink(f"/proc/{pid}/fd/1").endswith(f"/logs/{run_id}.log")
    except OSError:
        return False


def kill_orphan(pid: int | None, run_id: str) -> None:
    """SIGKILL a lost run's trial process if it still runs (its agent died under it)."""
    if pid is None or not _is_trial_of(pid, run_id):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
