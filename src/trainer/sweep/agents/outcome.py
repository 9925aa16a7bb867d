"""How a sweep command's agents ended, in one error: interrupted (Ctrl-C or SIGTERM: resume
with rerun_crashed), or gave up / failed (fix the cause); none when every agent exited 0."""

from __future__ import annotations

import signal
from typing import Any

from trainer.errors import TrainerError

# An agent stopped by SIGINT/SIGTERM (or a cluster's warning, SIGUSR1/SIGUSR2) exits
# 128 + signal, its trial saved with a checkpoint.
INTERRUPT_CODES = tuple(
    128 + s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
)


class SweepInterrupted(TrainerError):
    """Ctrl-C (SIGINT) or SIGTERM stopped the sweep's agents; exit 128 + signal, message as is."""

    prefix = ""


def agent_failure(result: dict[str, Any]) -> TrainerError | None:
    """The error for a sweep whose agents were interrupted, gave up or failed; None when all
    exited 0."""
    codes = result.get("agent_exit_codes") or []
    failed = [code for code in codes if code != 0]
    sweep_id = result.get("sweep_id")
    left = result.get("to_resume") or []
    if not failed and left:  # the cluster took runs back and no agent was left to resume them
        return TrainerError(
            f"sweep {sweep_id}: every agent has ended, but {len(left)} run(s) went back to the "
            f"sweep and wait to resume from their checkpoint ({', '.join(left)}). Resume them "
            f"with python -m trainer.agent {sweep_id} from any machine that reaches the sweep, "
            f"or the same command plus hydra.sweeper.sweep_id={sweep_id}.",
            exit_code=1,
        )
    if not failed:
        return None
    if all(code in INTERRUPT_CODES for code in failed):
        return SweepInterrupted(
            f"sweep {sweep_id} interrupted ({signal.Signals(failed[0] - 128).name}); each "
            "running trial saved its checkpoint. Resume with the same command plus "
            f"hydra.sweeper.sweep_id={sweep_id} hydra.sweeper.rerun_crashed=true "
            "(an interrupted trial continues from its last.pt, same run and W&B run).",
            exit_code=failed[0],
        )
    return TrainerError(
        f"{len(failed)} of {len(codes)} agent(s) of sweep {sweep_id} gave up or "
        f"failed (exit codes {codes}); their message above names the failed runs and logs. "
        f"Fix the cause and resume with hydra.sweeper.sweep_id={sweep_id}.",
        exit_code=1,
    )
