"""`python -m trainer.cache ls [PATH] | export PATH [--model M] | import PATH`: the workloads a
compile cache (or a bundle, a sweep's, a .tar.gz) holds per machine key; ship them by hand."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainer.cache import shipping
from trainer.cache.bundle import Bundle, BundleLayout
from trainer.cache.key import describe
from trainer.errors import TrainerError, exit_on_error
from trainer.outputs.layout import default_cache_root


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _runs(ids: list[str], shown: int = 4) -> str:
    """The first `shown` run ids, whole, and how many more."""
    more = f" +{len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def ls(bundle: Bundle, where: Path) -> None:
    here = shipping.this_machine()
    keys = bundle.parts()
    if not keys:
        print(f"{where}: no compile-cache records (runs record what they compile as they end)")
        return
    console = Console()
    for kid, key in keys.items():
        mark = " (this machine)" if kid in here else ""
        console.print(f"{kid}{mark}: {describe(key)}", highlight=False)
        table = Table()
        # ids, names and numbers never wrap; the run ids and the date wrap between words
        for column, width in (
            ("workload", 0),
            ("model", 0),
            ("files", 0),
            ("runs", 8),
            ("last added", 10),
        ):
            table.add_column(column, no_wrap=not width, min_width=width or None)
        by_workload: dict[str, list[dict]] = {}
        for record in bundle.records(kid):
            by_workload.setdefault(record["workload_id"], []).append(record)
        for wid, records in by_workload.items():
            files = {f: n for r in records for f, n in r["files"].items()}
            table.add_row(
                wid,
                records[-1].get("label", "?"),
                f"{len(files)} ({_size(sum(files.values()))})",
                _runs(sorted({str(r.get("run")) for r in records})),
                time.strftime("%Y-%m-%d %H:%M", time.localtime(records[-1].get("added_at", 0))),
            )
        console.print(table)


def export(source: Bundle, target: Path, models: list[str]) -> None:
    workloads, files = shipping.export(source, target, models)
    if not workloads:
        which = f" of model {', '.join(models)}" if models else ""
        raise TrainerError(
            f"export: {source.layout.root} holds no recorded workload{which}; see "
            "`python -m trainer.cache ls` (a cache records what each run compiles as it ends).",
            exit_code=1,
        )
    print(f"exported {workloads} workload(s), {files} file(s) to {target}")


def import_(source: Bundle, cache_dir: Path) -> None:
    cache = Bundle(BundleLayout(cache_dir, in_cache=True))
    copied, skipped = shipping.import_into(source, cache, shipping.this_machine())
    for line in skipped:
        print(line)
    if len(skipped) == len(source.parts()):
        raise TrainerError(
            f"import: nothing in {source.layout.root} was compiled for this machine "
            "(see the skipped parts above); export it again on a machine like this one.",
            exit_code=1,
        )
    print(f"imported {copied} file(s) into {cache_dir}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer.cache", description=__doc__)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the compile cache (default: paths.cache_dir: $TRAINER_CACHE_DIR or "
        "~/.cache/compiled-trainer)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("ls", help="workloads per machine key, with files and size")
    listing.add_argument("path", nargs="?", type=Path, help="a bundle, .tar.gz or sweep dir")
    out = sub.add_parser("export", help="write the cache (or --from a bundle) as a bundle")
    out.add_argument("path", type=Path, help="a new folder, or a file ending in .tar.gz")
    out.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    out.add_argument("--from", dest="source", type=Path, default=None, help="bundle or sweep dir")
    into = sub.add_parser("import", help="merge a bundle's parts for this machine into the cache")
    into.add_argument("path", type=Path, help="a bundle folder, .tar.gz or sweep dir")
    return parser


@exit_on_error
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache_dir = (args.cache_dir or default_cache_root()).expanduser().resolve()
    if args.command == "ls":
        with shipping.opened(args.path or cache_dir, "ls") as bundle:
            ls(bundle, args.path or cache_dir)
    elif args.command == "export":
        if args.path.exists() and (not args.path.is_dir() or any(args.path.iterdir())):
            raise TrainerError(f"export {args.path}: it exists; choose a new folder or file.")
        with shipping.opened(args.source or cache_dir, "export --from") as bundle:
            export(bundle, args.path, args.model)
    else:
        with shipping.opened(args.path, "import") as bundle:
            import_(bundle, cache_dir)
    return 0


if __name__ == "__main__":
    main()
