"""`python -m trainer.agent SWEEP [--count K]`: join a local sweep from any terminal, by its id or
its directory, the offline twin of `wandb agent`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.errors import TrainerError, exit_on_error
from trainer.sweep.agents import cpu_share, gpu_slots
from trainer.sweep.agents.local_agent import LocalAgent
from trainer.sweep.report import leaderboard
from trainer.sweep.store.directory import SweepLayout, UnknownSweep, find, output_root, recorded
from trainer.sweep.store.opening import open_sweep

if TYPE_CHECKING:
    from trainer.sweep.store.database import SweepStore


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.agent", description=__doc__)
    parser.add_argument(
        "sweep",
        help="id of a local sweep (python -m trainer.sweep ls), or its directory (hydra.sweep.dir)",
    )
    parser.add_argument("--count", type=int, default=None, help="run at most this many trials")
    parser.add_argument(
        "--storage",
        default=None,
        help="the sweep's database when it is a server (hydra.sweeper.storage), e.g. "
        "postgresql://user@host:5432/db; password from the URL, PGPASSWORD or ~/.pgpass",
    )
    parser.add_argument(
        "--root",
        default=None,
        help="output root holding sweeps/ (default: $TRAINER_OUTPUT_DIR or outputs)",
    )
    parser.add_argument(
        "--rerun-crashed",
        action="store_true",
        help="rerun runs that crashed (their agent died) before new ones",
    )
    parser.add_argument(
        "--max-consecutive-failures",
        type=int,
        default=RunnerConf.max_consecutive_failures,
        help="give up after this many failed runs in a row (hydra.sweeper.max_consecutive_failures)",
    )
    parser.add_argument(
        "--cpus-per-trial",
        type=int,
        default=None,
        help="CPUs (threads and cores) each trial gets (default: the sweep's setting, else the "
        "CPUs the sweep's other agents leave free)",
    )
    parser.add_argument(
        "--devices",
        default=None,
        help="GPUs its trials may take, as torch numbers them here (e.g. 2,3; default: the "
        "sweep's hydra.sweeper.devices); never one that another agent's trial holds",
    )
    parser.add_argument(
        "--paused-wait",
        type=float,
        default=None,
        metavar="S",
        help="on a paused sweep, wait at most S seconds, then exit 0 (default: inside a SLURM "
        f"job {RunnerConf.paused_wait_s:g}, hydra.sweeper.paused_wait_s's default, so the "
        "allocation does not idle; elsewhere until the sweep is resumed)",
    )
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="do not print the leaderboard at the end (results.json and best.yaml are still "
        "refreshed, and sweep.png drawn when the sweep has ended)",
    )
    return parser


def _devices(text: str | None) -> list[str] | None:
    """--devices 2,3 as CUDA_VISIBLE_DEVICES entries (TrainerError when it names no GPU here)."""
    if text is None:
        return None

    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
        return gpu_slots.resolve(indices)
    except ValueError as err:
        message = str(err).replace("hydra.sweeper.devices", "--devices")
        if "invalid literal" in message:
            message = f"--devices {text}: give GPU indices separated by commas, e.g. 0,1"
        raise TrainerError(message) from err


def _sweep(sweep: str, storage: str | None, root: Path) -> tuple[SweepLayout, SweepStore | None]:
    """The sweep's directory and, with --storage, its store on that server (a machine that
    has no directory of the sweep yet gets <root>/sweeps/<id>/ for its runs)."""
    if storage is None:
        return find("sweep", sweep, root), None
    try:
        layout = find("sweep", sweep, root)
    except UnknownSweep:
        layout = SweepLayout.under(root, sweep)
    sweep_id = (recorded(layout.root) or {}).get("sweep_id") or sweep
    return layout, open_sweep(storage, sweep_id, layout.root)


def _paused_wait(given: float | None) -> float | None:
    """How long the agent waits on a paused sweep: --paused-wait; inside a SLURM job the
    sweeper's default; else until it is resumed (None)."""
    if given is not None:
        return given
    return RunnerConf.paused_wait_s if os.environ.get("SLURM_JOB_ID") else None


@exit_on_error
def main(argv: list[str] | None = None) -> int:
    """The agent."""
    args = _parser().parse_args(argv)
    problem = cpu_share.per_trial_problem(
        args.cpus_per_trial, cpu_share.process_limits(), "--cpus-per-trial"
    )
    if problem:
        raise TrainerError(problem)
    devices = _devices(args.devices)
    root = Path(args.root) if args.root is not None else output_root()
    layout, store = _sweep(args.sweep, args.storage, root)
    agent = LocalAgent(
        layout,
        store=store,
        rerun_crashed=args.rerun_crashed,
        max_consecutive_failures=args.max_consecutive_failures,
        cpus_per_trial=args.cpus_per_trial,
        devices=devices,
        paused_wait_s=_paused_wait(args.paused_wait),
    )
    try:
        return agent.run(args.count)
    finally:  # the sweep's files now include this agent's runs (all of them, if it ends last)
        res = leaderboard.write_final(agent.store, agent.sweep_id, agent.layout)
        if not args.no_report:
            leaderboard.print_leaderboard(res)


if __name__ == "__main__":
    sys.exit(main())
