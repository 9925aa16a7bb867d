"""`python -m trainer.sweep show SWEEP_ID | ls`: a local sweep's leaderboard and plot, or the
list of local sweeps with method, state and best metric."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.sweep import report
from trainer.sweep.agent import UnknownSweep, output_root, sweep_dir
from trainer.sweep.store import SweepStore


def show(sweep_id: str, root: Path) -> int:
    directory = sweep_dir(root, sweep_id)
    if not (directory / "sweep.db").is_file():
        print(f"error: {UnknownSweep('sweep_id', sweep_id, root)}", file=sys.stderr)
        return 2
    store = SweepStore(directory / "sweep.db")
    res = report.write(store, sweep_id, directory)
    report.print_leaderboard(res)
    png = report.plot(store, res, directory / "sweep.png")
    print(f"wrote {png}")
    return 0


def ls(root: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"local sweeps in {root / 'sweeps'}")
    for col in ("sweep", "method", "state", "runs", "metric", "best"):
        table.add_column(col)
    sweeps = sorted((root / "sweeps").glob("*/sweep.db"), key=lambda p: p.stat().st_mtime)
    for db in sweeps:
        store = SweepStore(db)
        res = report.results(store, db.parent.name)
        metric = res["metric"] or {}
        best = res["best"]
        table.add_row(
            db.parent.name,
            str(res["method"]),
            str(store.get("state", "created")),
            str(len(res["runs"])),
            f"{metric.get('name', '-')} ({metric.get('goal', '-')})",
            "-" if best is None else f"{best['metric']:.4g} ({best['id']})",
        )
        store.close()
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.sweep", description=__doc__)
    parser.add_argument(
        "--root",
        default=None,
        help="output root (default: paths.output_dir: $TRAINER_OUTPUT_DIR or outputs)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ls", help="list local sweeps")
    show_parser = sub.add_parser("show", help="leaderboard and sweep.png of one sweep")
    show_parser.add_argument("sweep_id")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else output_root()
    if args.command == "ls":
        return ls(root)
    return show(args.sweep_id, root)


if __name__ == "__main__":
    sys.exit(main())
