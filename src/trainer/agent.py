"""`python -m trainer.agent SWEEP_ID [--count K]`: join a local sweep from any terminal, the
offline twin of `wandb agent`."""

from __future__ import annotations

import argparse
import sys

from trainer import cpu_share
from trainer.sweep.agent import LocalAgent, UnknownSweep, output_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.agent", description=__doc__)
    parser.add_argument("sweep_id", help="id of a local sweep (python -m trainer.sweep ls)")
    parser.add_argument("--count", type=int, default=None, help="run at most this many trials")
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
        default=5,
        help="give up after this many failed runs in a row",
    )
    parser.add_argument(
        "--cpus-per-trial",
        type=int,
        default=None,
        help="CPUs (threads and cores) each trial gets (default: the sweep's setting, else the "
        "CPUs the sweep's other agents leave free)",
    )
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="do not refresh results.json / best.yaml nor print the leaderboard at the end",
    )
    args = parser.parse_args(argv)
    problem = cpu_share.per_trial_problem(
        args.cpus_per_trial, cpu_share.process_limits(), "--cpus-per-trial"
    )
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        agent = LocalAgent(
            args.sweep_id,
            root=args.root if args.root is not None else output_root(),
            rerun_crashed=args.rerun_crashed,
            max_consecutive_failures=args.max_consecutive_failures,
            cpus_per_trial=args.cpus_per_trial,
        )
    except UnknownSweep as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    code = agent.run(args.count)
    if not args.no_report:  # the sweep's files now include this agent's runs
        from trainer.sweep import report

        report.print_leaderboard(report.write(agent.store, agent.sweep_id, agent.dir))
    return code


if __name__ == "__main__":
    sys.exit(main())
