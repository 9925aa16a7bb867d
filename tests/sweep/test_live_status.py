"""The sweep command in a terminal shows one live status (runs by state, the best so far, each
running run's epoch) instead of its agents' interleaved lines, which go to logs/agent-<i>.log;
in a pipe it prints plain lines as before."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a real sweep

SWEEP = [
    "-m",
    "hydra/sweeper=wandb",
    "hydra.sweeper.method=grid",
    "hydra.sweeper.metric={name: val/acc, goal: maximize}",
    "optimizer.lr=choice(0.05)",
    "compile=off",
    "logger=none",
    "trainer.max_epochs=2",
]


def _in_a_terminal(argv: list[str], cwd) -> tuple[int, str]:
    """Run `argv` with its output on a pseudo-terminal; its exit code and what it showed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    proc = subprocess.Popen(argv, cwd=cwd, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: every writer has ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))  # no colours
    return proc.wait(timeout=300), plain.replace("\r", "")


def test_a_sweep_in_a_terminal_shows_a_live_status_and_logs_its_agents(tmp_path):
    code, shown = _in_a_terminal([sys.executable, "-m", "trainer", *SWEEP], tmp_path)
    assert code == 0, shown[-3000:]
    assert "1 run(s): 1 finished" in shown and "logs/agent-<i>.log" in shown
    assert "agent: starting run" not in shown  # the agents' lines went to their log
    (log,) = (tmp_path / "outputs").rglob("logs/agent-0.log")
    assert "agent: starting run" in log.read_text()
    assert "best:" in shown  # the leaderboard follows, as in a pipe
