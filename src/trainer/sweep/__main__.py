"""`python -m trainer.sweep [--storage URL] show SWEEP | ls`: a local sweep's leaderboard and plot
(by id or directory), or the list of local sweeps with method, state and best metric; with
--storage, the sweeps kept in that database server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.errors import exit_on_error
from trainer.layout import SweepLayout
from trainer.sweep.report import leaderboard
from trainer.sweep.search import dispatch
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import UnknownSweep, find, known, output_root, sweep_id_of
from trainer.sweep.store.opening import open_store, open_sweep, recorded, sweep_ids
from trainer.sweep.store.storage import Storage, shown

if TYPE_CHECKING:
    from rich.table import Table


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
    print(f"wrote {_relative(Path(png))}")
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


def _relative(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def _table(title: str) -> Table:
    """`ls`'s table: ids, states and run counts never wrap; the objectives and the best run
    wrap between words, so 80 columns keep every value whole."""
    from rich.table import Table

    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, no_wrap=col in ("sweep", "method", "state", "runs"))
    return table


def ls(root: Path) -> int:
    """Every local sweep under <root>/sweeps/ by its recorded id; one that lives in its own
    hydra.sweep.dir is named with its folder after the table (a path on its own line)."""
    from rich.console import Console

    table, away = _table(f"local sweeps in {_relative(root / 'sweeps')}"), []
    for _folder, layout in known(root):
        store = open_store(layout.root)
        sweep_id = sweep_id_of(store, layout)  # a folder under sweeps/ may have another name
        table.add_row(*_row(sweep_id, store))
        if _elsewhere(root, sweep_id, layout):
            away.append(f"{sweep_id} lives in {_relative(layout.root)}")
        store.close()
    console = Console()
    console.print(table)
    for line in away:
        console.print(line, highlight=False, soft_wrap=True)
    return 0


def ls_storage(storage: str) -> int:
    """The sweeps kept in the database of `storage`."""
    from rich.console import Console

    table = _table(f"sweeps in {shown(storage)}")
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
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else output_root()
    if args.command == "ls":
        return ls(root) if args.storage is None else ls_storage(args.storage)
    return show(args.sweep, root, args.storage)


if __name__ == "__main__":
    sys.exit(main())
