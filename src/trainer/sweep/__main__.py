"""`python -m trainer.sweep ls | show SWEEP | watch SWEEP | dashboard [SWEEP] | pause | resume |
stop | cancel SWEEP | stop SWEEP RUN... [--storage URL]`: the list of local sweeps (or those
kept in a database server), a sweep's leaderboard and plot (by id or directory), a sweep
followed from any terminal until it ends, its live web page, or W&B's verbs that steer it;
`extend SWEEP OVERRIDES... [--no-run]` grows a sweep in place (a new revision of its definition)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainer.errors import exit_on_error
from trainer.sweep import extend as extending
from trainer.sweep.report import leaderboard
from trainer.sweep.report.dashboard import serving as dashboard
from trainer.sweep.report.watch import watch
from trainer.sweep.search import dispatch
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import (
    SweepLayout,
    UnknownSweep,
    find,
    known,
    output_root,
    recorded,
    sweep_id_of,
    wandb_sweep,
)
from trainer.sweep.store.opening import open_store, open_sweep, sweep_ids
from trainer.sweep.store.storage import Storage, shown


def _open(sweep: str, root: Path, storage: str | None) -> tuple[SweepStore, SweepLayout, str]:
    """The sweep's store, directory and id: by id or directory here, or on the `storage`
    server (its files then go to its directory here)."""
    if storage is None:
        layout = find("sweep", sweep, root)
        store = open_store(layout.root)
    else:
        try:
            layout = find("sweep", sweep, root)
        except UnknownSweep:
            layout = SweepLayout.under(root, sweep)
        store = open_sweep(
            storage, (recorded(layout.root) or {}).get("sweep_id") or sweep, layout.root
        )
    return store, layout, sweep_id_of(store, layout)


def show(sweep: str, root: Path, storage: str | None = None) -> int:
    store, layout, sweep_id = _open(sweep, root, storage)
    res = leaderboard.write(store, sweep_id, layout)
    leaderboard.print_leaderboard(res)
    png = leaderboard.plot(store, res, layout.plot)
    print(f"wrote {_relative(Path(png))}")
    return 0


def _going(store: SweepStore) -> list[str]:
    """The ids of the runs that train now."""
    return [r.id for r in store.runs() if r.state == "running"]


def _steered(verb: str, change: steering.Change, store: SweepStore, sweep_id: str) -> str:
    """What a verb did, and what every agent does about it within its next poll."""
    poll = f"within {steering.POLL_S:g} s (an agent's poll)"
    going = _going(store)
    runs = f"{len(going)} running run(s){': ' + ', '.join(going) if going else ''}"
    head = f"sweep {sweep_id}: {change.said()}."
    resume = f"python -m trainer.sweep resume {sweep_id}"
    if verb == "pause":
        return (
            f"{head} No new run is handed out; {runs} go on. Every agent waits {poll}; one in a "
            "launcher job (SLURM) waits hydra.sweeper.paused_wait_s, then exits 0. Undo it "
            f"with {resume}."
        )
    if verb == "resume":
        live = len(store.live_agents())
        return (
            f"{head} Waiting agents claim runs again {poll} ({live} agent(s) alive). Agents "
            f"that left (a launcher job leaves after hydra.sweeper.paused_wait_s) come back "
            f"with python -m trainer.agent {sweep_id}, or the sweep command with "
            f"hydra.sweeper.sweep_id={sweep_id}."
        )
    if verb == "stop":
        return (
            f"{head} No new run is handed out; {runs} finish, and whoever ends last writes "
            "results.json; every agent then exits 0."
        )
    return (
        f"{head} {runs} get SIGTERM {poll} (each saves its last.pt) and end cancelled; "
        "nothing resumes them, and every agent exits 0."
    )


def steer(verb: str, sweep: str, runs: list[str], root: Path, storage: str | None) -> int:
    """W&B's verbs on a sweep from any terminal (trainer.sweep.store.steering): pause, resume,
    stop, cancel; `stop` given run ids stops those runs, and the sweep goes on. A sweep of the
    W&B server (backend=wandb) is steered there, with W&B's own verbs."""
    on_wandb = wandb_sweep(sweep, root) if storage is None else None
    if on_wandb is not None:
        return _steer_on_wandb(verb, on_wandb, runs)
    store, layout, sweep_id = _open(sweep, root, storage)
    try:
        if runs:
            stopped = store.stop_runs(runs, sweep_id)
            for run in stopped:
                how = (
                    f"gets SIGTERM within {steering.POLL_S:g} s (an agent's poll), saves its "
                    "last.pt and ends stopped"
                    if run.state == "running"
                    else "was waiting to resume: stopped now"
                )
                print(f"sweep {sweep_id}: run {run.id} {how}; never resumed by itself")
            print(f"sweep {sweep_id} goes on; stopped by {steering.who()}")
            return 0
        change = store.steer(verb, sweep_id, steering.who())
        print(_steered(verb, change, store, sweep_id))
        if verb in ("stop", "cancel") and not _going(store) and not store.live_agents():
            leaderboard.write_final(store, sweep_id, layout)  # nobody is left to write it
            print(f"wrote {_relative(layout.results)}")
        return 0
    finally:
        store.close()


def _steer_on_wandb(verb: str, on_wandb: dict[str, str], runs: list[str]) -> int:
    """W&B's verbs on a W&B-server sweep ({path, url}): `wandb sweep --VERB`, or Stop run."""
    # lazy: W&B's client costs 0.3-0.6 s at start-up; only a W&B sweep's verbs need it
    from trainer.sweep import server_steering

    path, url = on_wandb["path"], on_wandb["url"]
    if runs:
        print("\n".join(server_steering.stop_runs(path, runs, url)))
    else:
        print(server_steering.change_state(verb, path, url))
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
    state = dispatch.sweep_state(str(store.get("state", "created")), store)
    change = steering.Change.of(res["state_changed"])
    if change is not None and state.split(" ")[0] == change.state:  # who steered it, when
        state += f"\n{change.by}\n{change.when}"
    row = [
        sweep_id,
        str(res["method"]),
        state,
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
    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, no_wrap=col in ("sweep", "method", "state", "runs"))
    return table


def ls(root: Path) -> int:
    """Every local sweep under <root>/sweeps/ by its recorded id; one that lives in its own
    hydra.sweep.dir is named with its folder after the table (a path on its own line)."""
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
    table = _table(f"sweeps in {shown(storage)}")
    for sweep_id in sweep_ids(storage):
        store = SweepStore(storage=Storage.server(storage, sweep_id))
        if store.config is not None:  # a sweep still being created has none yet
            table.add_row(*_row(store.get("sweep_id") or sweep_id, store))
        store.close()
    Console().print(table)
    return 0


def _common(parser: argparse.ArgumentParser, default: object = None) -> None:
    """--root and --storage, taken before the subcommand or after it (as people type them)."""
    parser.add_argument(
        "--root",
        default=default,
        help="output root (default: paths.output_dir: $TRAINER_OUTPUT_DIR or outputs)",
    )
    parser.add_argument(
        "--storage",
        default=default,
        help="a sweep database server (hydra.sweeper.storage), e.g. "
        "postgresql://user@host:5432/db: ls lists its sweeps, the other commands act on the "
        "sweep there",
    )


VERB_HELP = {
    "pause": "no new run is handed out; running runs go on; agents wait",
    "resume": "undo a pause: agents claim runs again",
    "stop": "no new run; running runs finish; the sweep ends stopped (with RUN ids: stop those "
    "runs, as hyperband would, and the sweep goes on)",
    "cancel": "running runs get SIGTERM now (last.pt saved) and end cancelled; the sweep ends "
    "cancelled",
}


def _extend_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`extend SWEEP OVERRIDES... [--default KEY=VALUE] [--no-run]`."""
    growing = sub.add_parser(
        "extend",
        help="grow a sweep in place: more runs, a wider range, grid values or a parameter "
        "added (a new revision of its definition; every run kept and told to its engine)",
    )
    growing.add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
    growing.add_argument(
        "overrides",
        nargs="+",
        metavar="OVERRIDE",
        help="as the sweep command takes them: hydra.sweeper.run_cap=80, optimizer.lr=0.1,0.05,"
        "0.02, 'optimizer.lr=tag(log, interval(0.0001, 1.0))', hydra.sweeper.params.KEY=...",
    )
    growing.add_argument(
        "--default",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter added now: the value every run so far had (default: its fixed "
        "override in the trials' command)",
    )
    growing.add_argument(
        "--no-run",
        action="store_true",
        help="only record the new revision and print how agents join; run nothing",
    )
    return growing


def extend(args: argparse.Namespace, root: Path) -> int:
    """A new revision of the sweep's definition; its new runs run here unless agents live."""
    defaults = extending.defaults_of(args.default)
    on_wandb = wandb_sweep(args.sweep, root) if args.storage is None else None
    if on_wandb is not None:
        raise extending.ExtendError(
            f"extend {args.sweep}: the sweep runs on the W&B server ({on_wandb['path']}), which "
            "refuses to change a started sweep's definition; start a new W&B sweep with the new "
            "definition (wandb sweep --prior_run RUN_ID tells it earlier runs), or run the "
            "search on the local backend. Nothing was changed."
        )
    store, layout, sweep_id = _open(args.sweep, root, args.storage)
    try:
        return extending.extend(
            store,
            layout,
            sweep_id,
            args.overrides,
            root=root,
            storage=args.storage,
            defaults=defaults,
            run=not args.no_run,
        )
    finally:
        store.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.sweep", description=__doc__)
    _common(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser(
        "ls", help="list local sweeps (with --storage: the sweeps in that database)"
    )
    show_parser = sub.add_parser("show", help="leaderboard and sweep.png of one sweep")
    show_parser.add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
    watch_parser = sub.add_parser(
        "watch",
        help="follow a sweep from any terminal (its command may be gone: agents in jobs go on) "
        "until it ends, then its leaderboard",
    )
    watch_parser.add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
    watch_parser.add_argument(
        "--every", type=float, default=5.0, help="seconds between progress lines (default 5)"
    )
    serving = dashboard.add_parser(sub)
    verbs = []
    for verb, what in VERB_HELP.items():
        verbs.append(sub.add_parser(verb, help=what))
        verbs[-1].add_argument("sweep", help="a sweep id (see ls) or a sweep directory")
        if verb == "stop":
            verbs[-1].add_argument(
                "runs", nargs="*", metavar="RUN", help="stop only these runs; the sweep goes on"
            )
    growing = _extend_parser(sub)
    for child in (listing, show_parser, watch_parser, serving, *verbs, growing):
        _common(child, argparse.SUPPRESS)  # after the subcommand too, without resetting
    return parser


@exit_on_error
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = Path(args.root) if args.root else output_root()
    if args.command == "dashboard":
        return dashboard.main(args, root)
    if args.command == "ls":
        return ls(root) if args.storage is None else ls_storage(args.storage)
    if args.command == "watch":
        return watch(_open(args.sweep, root, args.storage), args.every)
    if args.command == "extend":
        return extend(args, root)
    if args.command in steering.VERBS:
        return steer(args.command, args.sweep, getattr(args, "runs", []), root, args.storage)
    return show(args.sweep, root, args.storage)


if __name__ == "__main__":
    sys.exit(main())
