"""Whether a folder lives on a network filesystem (NFS, CIFS/SMB, Lustre, GPFS...), read from the
mount table (the longest mount point that holds it): SQLite's locking is unreliable there, so
a sweep.db in such a folder gets one warning that names `hydra.sweeper.storage`."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

NETWORK = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "glusterfs", "beegfs"}
)
_warned: set[Path] = set()


def mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount of this machine."""
    try:
        return [(p.mountpoint, p.fstype) for p in psutil.disk_partitions(all=True)]
    except OSError:
        try:
            lines = Path("/proc/mounts").read_text().splitlines()
        except OSError:
            return []
        return [(f[1], f[2]) for f in (line.split() for line in lines) if len(f) > 2]


def filesystem(folder: str | Path, table: list[tuple[str, str]] | None = None) -> str | None:
    """The filesystem type of the mount that holds `folder` (the longest mount point prefix)."""
    path = Path(folder).resolve()
    best, kind = -1, None
    for point, fstype in mounts() if table is None else table:
        mount = Path(point)
        if (path == mount or mount in path.parents) and len(mount.parts) > best:
            best, kind = len(mount.parts), fstype
    return kind


def warn_if_network(folder: str | Path, table: list[tuple[str, str]] | None = None) -> bool:
    """Warn once per folder and process when the sweep's SQLite file is on a network
    filesystem; whether it is."""
    kind = filesystem(folder, table)
    if kind is None or kind.split(".")[0].lower() not in NETWORK:
        return False
    where = Path(folder).resolve()
    if where not in _warned:
        _warned.add(where)
        print(
            f"sweep: warning: {where} is on a network filesystem ({kind}); SQLite's locking is "
            "unreliable there, so agents on several machines sharing its sweep.db may hand out "
            "a run twice. Keep a sweep shared across machines in a database server instead: "
            "hydra.sweeper.storage=postgresql://user@host:5432/db (python -m trainer.agent ID "
            "--storage URL), or keep hydra.sweep.dir on a local disk.",
            file=sys.stderr,
            flush=True,
        )
    return True
