"""Shipping a compile cache by hand: a bundle as a folder or a .tar.gz, read from a cache dir,
a bundle folder or a folder that keeps one (a sweep directory); export (optionally only some
models' workloads) and import (only the parts whose machine key is this machine's, saying what
was skipped)."""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.cache.bundle import Bundle, BundleLayout
from trainer.cache.key import describe, differences, key_id, machine_key
from trainer.errors import TrainerError
from trainer.outputs.layout import default_output_root, sweeps_root

ARCHIVES = (".tar.gz", ".tgz")


def is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVES)


@contextlib.contextmanager
def opened(path: Path, what: str) -> Iterator[Bundle]:
    """The bundle at `path`: a .tar.gz (unpacked for the duration), a folder that keeps one (a
    sweep directory: its compile_cache/), a cache dir (its own records) or a bundle folder."""
    path = Path(path).expanduser()
    by_id = sweeps_root(default_output_root()) / str(path)
    if not path.exists() and len(path.parts) == 1 and by_id.is_dir():
        path = by_id  # a sweep id, as `trainer.agent` and `trainer.sweep show` take
    if is_archive(path) and path.is_file():
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as tmp:
            with tarfile.open(path, "r:gz") as archive:
                archive.extractall(tmp, filter="data")  # no links out, no absolute paths
            yield Bundle(BundleLayout(Path(tmp)))
        return
    if not path.is_dir():
        raise TrainerError(
            f"{what} {path}: no such folder or .tar.gz; give a bundle written by "
            "`python -m trainer.cache export`, a sweep directory or id, or a cache dir."
        )
    if BundleLayout.kept_in(path).root.is_dir():
        path = BundleLayout.kept_in(path).root
    in_cache = (path / "inductor").is_dir() or (path / "bundle").is_dir()
    yield Bundle(BundleLayout(path, in_cache=in_cache))


def this_machine() -> dict[str, dict[str, Any]]:
    """key id -> key of every device kind here: the CPU, and CUDA when a GPU is visible."""
    # lazy: torch costs 1.3 s at start-up; `python -m trainer.cache export` needs none
    import torch

    keys = [machine_key("cpu")]
    if torch.cuda.is_available():
        keys.append(machine_key(torch.device("cuda", 0)))
    return {key_id(k): k for k in keys}


def export(source: Bundle, target: Path, models: list[str]) -> tuple[int, int]:
    """Write the source's parts (only the workloads of `models`, when given) as a bundle at
    `target` (a folder, or a .tar.gz); returns (workloads, files)."""

    def keep(record: dict[str, Any]) -> bool:
        return not models or record.get("workload", {}).get("model", {}).get("name") in models

    with contextlib.ExitStack() as stack:
        folder = target
        if is_archive(target):
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="compile-cache-")))
        out = Bundle(BundleLayout(folder))
        workloads = files = 0
        for kid in source.parts():
            kept = [r for r in source.records(kid) if keep(r)]
            if kept:
                files += source.put_in_place(kid, out, keep)
                workloads += len({r["workload_id"] for r in kept})
        if is_archive(target) and workloads:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(target, "w:gz") as archive:
                for part in sorted(folder.iterdir()):
                    archive.add(part, arcname=part.name)
    return workloads, files


def import_into(source: Bundle, cache: Bundle, here: dict[str, dict]) -> tuple[int, list[str]]:
    """Copy the source's parts for this machine into the cache; returns (files copied, one
    line per part skipped, with the key parts that differ)."""
    copied, skipped = 0, []
    for kid, key in source.parts().items():
        if kid in here:
            copied += source.put_in_place(kid, cache)
            continue
        closest = min((differences(key, ours) for ours in here.values()), key=len)
        skipped.append(f"skipped {kid} ({describe(key)}): {'; '.join(closest) or 'another key'}")
    return copied, skipped
