"""`python -m trainer.sweep show SWEEP | ls`: a local sweep's leaderboard and plot (by id or
directory), or the list of local sweeps with method, state and best metric."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.errors import exit_on_error
from trainer.layout import SweepLayout
from trainer.sweep.report import leaderboard
from trainer.sweep.search import dispatch
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import find, known, output_root, sweep_id_of


def show(sweep: str, root: Path) -> int:
    layout = find("sweep", sweep, root)
    store = SweepStore(layout.db)
    res = leaderboard.write(store, sweep_id_of(store, layout), layout)
    leaderboard.print_leaderboard(res)
    png = leaderboard.plot(store, res, layout.plot)
    print(f"wrote {png}")
    return 0


def _elsewhere(root: Path, sweep_id: str, layout: SweepLayout) -> bool:
    """Whether the sweep lives in its own hydra.sweep.dir (linked from <root>/sweeps/<id>)."""
    home = SweepLayout.under(root, sweep_id).root
    return home.is_symlink() or home.resolve() != layout.root


def _run_count(runs: list[dict]) -> str:
    """How many runs, and how many of them an optimizer pruned."""
    pruned = sum(1 for r in runs if r["state"] == "pruned")
    return f"{len(runs)} ({pruned} pruned)" if pruned else str(len(runs))


def ls(root: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    sweeps = known(root)
    elsewhere = any(_elsewhere(root, sweep_id, layout) for sweep_id, layout in sweeps)
    table = Table(title=f"local sweeps in {root / 'sweeps'}")
    for col in ("sweep", "method", "state", "runs", "metric", "best", *(["dir"] * elsewhere)):
        table.add_column(col, overflow="fold")
    for sweep_id, layout in sweeps:
        store = SweepStore(layout.db)
        res = leaderboard.results(store, sweep_id)
        goals = res.get("metrics") or [res["metric"] or {}]
        best = res["best"]
        front = res.get("pareto_front")
        row = [
            sweep_id,
            str(res["method"]),
            dispatch.sweep_state(str(store.get("state", "created")), store),
            _run_count(res["runs"]),
            ", ".join(f"{g.get('name', '-')} ({g.get('goal', '-')})" for g in goals),
            f"{best['metric']:.4g} ({best['id']})" if best else "-",
        ]
        if front is not None:  # multi-objective: the Pareto front's size
            row[-1] = f"Pareto front: {len(front)} run(s)"
        away = _elsewhere(root, sweep_id, layout)
        table.add_row(*row, *([str(layout.root) if away else "-"] * elsewhere))
        store.close()
    Console().print(table)
    return 0


@exit_on_error
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
    show_parser.add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else output_root()
    if args.command == "ls":
        return ls(root)
    return show(args.sweep, root)


if __name__ == "__main__":
    sys.exit(main())
