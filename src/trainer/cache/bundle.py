"""A compile-cache bundle on disk (a sweep's compile_cache/, an exported folder, a cache dir's
own records): its files (`BundleLayout`), parts per machine key, files copied in atomically and
never overwritten, one record per workload that added files. No locks: concurrent agents
(other machines on a shared sweep directory too) only add files named by their content's hash
and records of their own."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.cache.entries import cache_files
from trainer.cache.key import key_id
from trainer.outputs.layout import write_text_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BundleLayout:
    """A compile-cache bundle: one part per machine key (`key.json`), holding the cache files
    (as under a cache dir: inductor/, triton/) and one record per workload that added files.
    `in_cache`: a cache dir's own records (<cache>/bundle/<key>/), its files at the cache root."""

    root: Path
    in_cache: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def kept_in(cls, folder: str | Path) -> BundleLayout:
        """The bundle a folder keeps for the runs it holds (a local sweep directory's):
        <folder>/compile_cache/."""
        return cls(Path(folder) / "compile_cache")

    @property
    def parts_dir(self) -> Path:
        return self.root / "bundle" if self.in_cache else self.root

    def part(self, key_id: str) -> Path:
        return self.parts_dir / key_id

    def key_file(self, key_id: str) -> Path:
        return self.part(key_id) / "key.json"

    def records(self, key_id: str) -> Path:
        return self.part(key_id) / "records"

    def record(self, key_id: str, name: str) -> Path:
        return self.records(key_id) / f"{name}.json"

    def files(self, key_id: str) -> Path:
        """Where the part's cache files live (a cache dir's own: the cache root)."""
        return self.root if self.in_cache else self.part(key_id) / "files"


def copy_file(source: Path, target: Path) -> None:
    """Copy atomically (a reader sees no half file). Triton's group files name their kernel
    files by absolute path: rewritten to the target's folder, where those files land too."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp"
    try:
        if target.name.startswith("__grp__") and target.suffix == ".json":
            group = json.loads(source.read_text())
            children = group.get("child_paths") or {}
            group["child_paths"] = {
                k: str(target.parent / Path(v).name) for k, v in children.items()
            }
            tmp.write_text(json.dumps(group))
        else:
            shutil.copy2(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


class Bundle:
    """One bundle folder (or a cache dir's own records, `BundleLayout(root, in_cache=True)`)."""

    def __init__(self, layout: BundleLayout) -> None:
        self.layout = layout

    def parts(self) -> dict[str, dict[str, Any]]:
        """key id -> machine key, for every part."""
        found = {}
        if self.layout.parts_dir.is_dir():
            for part in sorted(self.layout.parts_dir.iterdir()):
                key = _read_json(self.layout.key_file(part.name))
                if not isinstance(key, dict):
                    continue
                if key_id(key) != part.name:  # edited or renamed: its files' origin is unknown
                    log.warning("compile cache: ignoring %s: its key.json is not its key", part)
                    continue
                found[part.name] = key
        return found

    def records(self, key_id: str) -> list[dict[str, Any]]:
        """The part's records (workload, run, files), oldest first."""
        return [doc for _, doc in self.record_files(key_id)]

    def record_files(self, key_id: str) -> list[tuple[Path, dict[str, Any]]]:
        folder = self.layout.records(key_id)
        found = [(p, _read_json(p)) for p in folder.glob("*.json")] if folder.is_dir() else []
        found = [
            (p, d) for p, d in found if isinstance(d, dict) and isinstance(d.get("files"), dict)
        ]
        return sorted(found, key=lambda item: item[1].get("added_at", 0))

    def files(self, key_id: str) -> dict[str, int]:
        return cache_files(self.layout.files(key_id))

    def add(
        self,
        key_id: str,
        key: dict[str, Any],
        source_root: Path,
        files: list[str],
        record: dict[str, Any],
    ) -> int:
        """Copy the `files` (relative to `source_root`) this part lacks and, unless the records
        of the same workload already list them all, record them. Returns the files copied."""
        key_file = self.layout.key_file(key_id)
        if not key_file.is_file():
            write_text_atomic(key_file, json.dumps(key, indent=2))
        target = self.layout.files(key_id)
        copied = 0
        for relative in files:
            if not (target / relative).exists() and (source_root / relative).is_file():
                copy_file(source_root / relative, target / relative)
                copied += 1
        known: set[str] = set()
        for old in self.records(key_id):
            if old.get("workload_id") == record["workload_id"]:
                known |= set(old["files"])
        if set(files) - known:
            sizes = {f: _size(source_root / f) for f in files}
            name = f"{record['workload_id']}-{uuid.uuid4().hex[:8]}"
            doc = {**record, "files": sizes, "host": socket.gethostname(), "added_at": time.time()}
            write_text_atomic(self.layout.record(key_id, name), json.dumps(doc, indent=2))
        return copied

    def put_in_place(self, key_id: str, into: Bundle, keep: Any = None) -> int:
        """Copy this part's files that `into` lacks into it, with the records it lacks; with
        `keep` (a test of a record), only the kept records and their files. Returns the files
        copied."""
        key = self.parts().get(key_id)
        if key is None:
            return 0
        records = [(p, d) for p, d in self.record_files(key_id) if keep is None or keep(d)]
        if keep is None:
            wanted = set(self.files(key_id))
        else:
            wanted = {f for _, doc in records for f in doc["files"]}
        source, target = self.layout.files(key_id), into.layout.files(key_id)
        copied = 0
        for relative in sorted(wanted):
            if not (target / relative).exists() and (source / relative).is_file():
                copy_file(source / relative, target / relative)
                copied += 1
        if not into.layout.key_file(key_id).is_file():
            write_text_atomic(into.layout.key_file(key_id), json.dumps(key, indent=2))
        for path, _ in records:
            if not (into.layout.records(key_id) / path.name).exists():
                copy_file(path, into.layout.records(key_id) / path.name)
        return copied


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        log.warning("compile cache: ignoring unreadable %s (%s)", path, err)
        return None
