"""`python -m trainer.sweep [--storage URL] show SWEEP | ls`: a local sweep's leaderboard and plot
(by id or directory), or the list of local sweeps with method, state and best metric; with
--storage, the sweeps kept in that database server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.errors import exit_on_error
from trainer.layout import SweepLayout
from trainer.sweep.report import leaderboard
from trainer.sweep.report.dashboard import serving as dashboard
from trainer.sweep.search import dispatch
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import UnknownSweep, find, known, output_root, sweep_id_of
from trainer.sweep.store.opening import open_store, open_sweep, recorded, sweep_ids
from trainer.sweep.store.storage import Storage, shown


def show(sweep: str, root: Path, storage: str | None = None) -> int:
    if storage is None:
        layout = find("sweep", sweep, root)
        store = open_store(layout.root)
    else:  # the sweep on that server; its files go to its directory here
        try:
            layout = find("sweep", sweep, root)
        except UnknownSweep:
            layout = SweepLayout.under(root, sweep)
        store = open_sweep(
            storage, (recorded(layout.root) or {}).get("sweep_id") or sweep, layout.root
        )
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


def _row(sweep_id: str, store: SweepStore) -> list[str]:
    """The sweep's line in `ls`: method, state, runs, metric, best."""
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
    return row


COLUMNS = ("sweep", "method", "state", "runs", "metric", "best")


def ls(root: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    sweeps = known(root)
    elsewhere = any(_elsewhere(root, sweep_id, layout) for sweep_id, layout in sweeps)
    table = Table(title=f"local sweeps in {root / 'sweeps'}")
    for col in (*COLUMNS, *(["dir"] * elsewhere)):
        table.add_column(col, overflow="fold")
    for sweep_id, layout in sweeps:
        store = open_store(layout.root)
        away = _elsewhere(root, sweep_id, layout)
        table.add_row(*_row(sweep_id, store), *([str(layout.root) if away else "-"] * elsewhere))
        store.close()
    Console().print(table)
    return 0


def ls_storage(storage: str) -> int:
    """The sweeps kept in the database of `storage`."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweeps in {shown(storage)}")
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for sweep_id in sweep_ids(storage):
        store = SweepStore(storage=Storage.server(storage, sweep_id))
        if store.config is not None:  # a sweep still being created has none yet
            table.add_row(*_row(store.get("sweep_id") or sweep_id, store))
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
    parser.add_argument(
        "--storage",
        default=None,
        help="a sweep database server (hydra.sweeper.storage), e.g. "
        "postgresql://user@host:5432/db: ls lists its sweeps, show reads the sweep there",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ls", help="list local sweeps (with --storage: the sweeps in that database)")
    show_parser = sub.add_parser("show", help="leaderboard and sweep.png of one sweep")
    show_parser.add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
    dashboard.add_parser(sub)
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else output_root()
    if args.command == "dashboard":
        return dashboard.main(args, root)
    if args.command == "ls":
        return ls(root) if args.storage is None else ls_storage(args.storage)
    return show(args.sweep, root, args.storage)


if __name__ == "__main__":
    sys.exit(main())
