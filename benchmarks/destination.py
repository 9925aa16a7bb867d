"""Where a benchmark writes its result files: the published figures under benchmarks/results/
only when asked (`--publish`), a folder of the user's choosing with `--out DIR`, else a scratch
folder, `outputs/benchmarks/` under the current directory, so a trial run never replaces a
published figure."""

from __future__ import annotations

import argparse
from pathlib import Path

PUBLISHED = Path(__file__).resolve().parent / "results"
SCRATCH = Path("outputs") / "benchmarks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--out DIR` and `--publish`, mutually exclusive."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"folder of the result files (default: {SCRATCH}/ under the current directory)",
    )
    group.add_argument(
        "--publish",
        action="store_true",
        help="write the published figures under benchmarks/results/ (replaces them)",
    )


def folder(args: argparse.Namespace) -> Path:
    """The folder chosen by `--out` / `--publish` (created), announced on stdout."""
    out = PUBLISHED if args.publish else (args.out or SCRATCH)
    out.mkdir(parents=True, exist_ok=True)
    if not args.publish:
        print(f"results go to {out}/ (--publish replaces the figures in benchmarks/results/)")
    return out
