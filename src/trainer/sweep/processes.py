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


def kill_orphan(pid: int | None, run_id: str) -> None:
    """SIGKILL a lost run's trial process if it still runs (its agent died under it)."""
    try:  # the pid may be reused: only a process whose command line names this run
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, TypeError):
        return
    if f"/runs/{run_id}" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
        except ProcessLookupError:
            return
