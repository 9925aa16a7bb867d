"""Which compile-cache entries this process touches. Inductor and Triton name every entry (an
FX graph, an AOTAutograd graph, a C++ or Triton kernel, its wrapper, a tuning record) by a hash:
a file or folder whose name starts with it. A PEP 578 audit hook sees each file this process
opens, creates, renames or lists under the cache dir; files sharing a touched hash are the
entries the run used or compiled (measured: all of a cold run's files, none of another's)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

# Cache folders a bundle carries (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR under the root).
TOP = ("inductor", "triton")
_HASHED = re.compile(r"^[A-Za-z0-9_-]{20,}")
_EVENTS = frozenset(("open", "os.rename", "os.mkdir", "os.listdir", "os.scandir", "os.remove"))


def entry_of(relative: str) -> str | None:
    """The hash naming the entry of a file (a path relative to the cache root), or None for
    files that belong to none. A lock names its entry too (a kernel loaded from the cache
    shows itself only by taking its lock)."""
    parts = relative.split("/")
    if len(parts) < 2 or parts[0] not in TOP:
        return None
    for part in parts[1:]:
        match = _HASHED.match(part)
        if match:
            return match.group(0)
    return None


def skipped(relative: str) -> bool:
    """Files a bundle never carries: locks and half-written temporaries."""
    name = relative.rsplit("/", 1)[-1]
    return (
        relative.startswith("inductor/locks/")
        or name == "lock"
        or name.endswith((".lock", ".tmp"))
        or any(p.startswith(("tmp.", ".tmp")) for p in relative.split("/"))
    )


def cache_files(root: Path) -> dict[str, int]:
    """Every file a bundle could carry under `root`: relative path -> size."""
    found = {}
    for top in TOP:
        for dirpath, _, names in os.walk(root / top):
            for name in names:
                path = Path(dirpath) / name
                relative = path.relative_to(root).as_posix()
                if not skipped(relative):
                    try:
                        found[relative] = path.stat().st_size
                    except FileNotFoundError:  # removed meanwhile (another process's temp)
                        continue
    return found


class _Watch:
    """The process-wide audit hook (one per process: hooks cannot be removed), recording the
    entries touched under `root` while it is set."""

    root: str | None = None
    touched: set[str] = set()
    installed = False

    @classmethod
    def hook(cls, event: str, args: tuple) -> None:
        if cls.root is None or event not in _EVENTS:
            return
        for arg in args:
            if isinstance(arg, str | bytes | os.PathLike):
                path = os.fsdecode(arg)
                if path.startswith(cls.root):
                    entry = entry_of(path[len(cls.root) :].lstrip("/"))
                    if entry:
                        cls.touched.add(entry)


def start_watching(root: Path) -> None:
    """Record the entries touched under `root` from now on (forgetting earlier ones)."""
    if not _Watch.installed:
        sys.addaudithook(_Watch.hook)
        _Watch.installed = True
    _Watch.touched = set()
    _Watch.root = os.path.realpath(root)


def stop_watching() -> set[str]:
    """Stop recording; the hashes of the entries touched since `start_watching`."""
    _Watch.root = None
    touched, _Watch.touched = _Watch.touched, set()
    return touched


def files_of(entries: set[str], files: dict[str, int]) -> list[str]:
    """The files (of `cache_files`) that belong to `entries`."""
    return sorted(f for f in files if entry_of(f) in entries)
