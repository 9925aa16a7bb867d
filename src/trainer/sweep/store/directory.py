"""Where local sweeps live: a sweep directory's files (`SweepLayout`), where it is
(`hydra.sweep.dir` when the user sets it, else <output root>/sweeps/<id>/), its id, the link
that lets the id find a sweep kept elsewhere, what it records of a database server
(storage.yaml), the hint that joins it, and its sweep.yaml. Each file name of a sweep
directory is spelled here and nowhere else, its compile-cache bundle's aside (compile_cache/,
the cache's: BundleLayout.kept_in)."""

from __future__ import annotations

import difflib
import json
import os
import secrets
import string
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainer.cache.bundle import BundleLayout
from trainer.errors import TrainerError
from trainer.outputs.layout import RunLayout, default_output_root, sweeps_root, write_text_atomic
from trainer.sweep.store.database import SweepStore


@dataclass(frozen=True)
class SweepLayout:
    """The files of one local sweep directory (`hydra.sweep.dir`, or <output>/sweeps/<id>/)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def under(cls, output_root: str | Path, sweep_id: str) -> SweepLayout:
        """The default place of a sweep: <output root>/sweeps/<sweep id>/."""
        return cls(cls.sweeps_dir(output_root) / sweep_id)

    @staticmethod
    def sweeps_dir(output_root: str | Path) -> Path:
        return sweeps_root(output_root)

    @property
    def db(self) -> Path:
        return self.root / "sweep.db"

    @property
    def storage(self) -> Path:
        """The sweep's database when it is not sweep.db: its URL (without password), its id."""
        return self.root / "storage.yaml"

    @property
    def yaml(self) -> Path:
        return self.root / "sweep.yaml"

    @property
    def wandb_sweep(self) -> Path:
        """backend=wandb: the sweep's W&B path and server, so that its id or directory finds it."""
        return self.root / "wandb_sweep.yaml"

    def revision(self, number: int) -> Path:
        """An earlier revision of sweep.yaml, kept when `extend` rewrote it: sweep.r1.yaml..."""
        return self.root / f"sweep.r{number}.yaml"

    @property
    def pbt(self) -> Path:
        """method: pbt: each member's reports, checkpoints per interval and lineage."""
        return self.root / "pbt"

    @property
    def results(self) -> Path:
        return self.root / "results.json"

    @property
    def best(self) -> Path:
        return self.root / "best.yaml"

    @property
    def plot(self) -> Path:
        return self.root / "sweep.png"

    @property
    def optimizer_log(self) -> Path:
        """The messages of a scheduler-driven sweep's optimizer (optuna, ax), every holder's."""
        return self.root / "logs" / "optimizer.log"

    @property
    def compile_cache(self) -> Path:
        """The sweep's compile-cache bundle, where the cache keeps one (BundleLayout.kept_in)."""
        return BundleLayout.kept_in(self.root).root

    def prewarm(self, workload_id: str) -> RunLayout:
        """The run directory of hydra.sweeper.prewarm's compile of one workload."""
        return RunLayout(self.root / "prewarm" / workload_id)

    def prewarm_log(self, workload_id: str) -> Path:
        return self.root / "prewarm" / f"{workload_id}.log"

    def run(self, run_id: str) -> RunLayout:
        return RunLayout(self.root / "runs" / run_id)

    def log(self, run_id: str) -> Path:
        return self.root / "logs" / f"{run_id}.log"

    def template_log(self, agent_pid: int) -> Path:
        """What an agent's trial template printed (import errors; trials log to their own)."""
        return self.root / "logs" / f"template-{agent_pid}.log"

    def params(self, run_id: str) -> Path:
        return self.root / "params" / f"{run_id}.yaml"

    def exists(self) -> bool:
        return self.db.is_file() or self.storage.is_file()


def recorded(sweep_dir: str | Path) -> dict[str, str] | None:
    """What the sweep directory records of its database ({url, sweep_id}), if it is a server's."""
    path = SweepLayout(Path(sweep_dir)).storage
    if not path.is_file():
        return None
    found = yaml.safe_load(path.read_text()) or {}
    if not isinstance(found, dict) or not found.get("url"):
        raise TrainerError(f"{path}: give url (the sweep's database URL) and sweep_id")
    return {"url": str(found["url"]), "sweep_id": str(found.get("sweep_id") or "")}


def record_storage(layout: SweepLayout, url: str, sweep_id: str) -> None:
    """Record in the sweep directory that its store is sweep `sweep_id` on the server of `url`
    (given without its password), so that the directory or the id finds the database."""
    entry = {"url": url, "sweep_id": sweep_id}
    if recorded(layout.root) != entry:
        layout.root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(layout.storage, yaml.safe_dump(entry, sort_keys=False))


def record_wandb(layout: SweepLayout, path: str, url: str) -> None:
    """Record that the sweep of this directory lives on the W&B server of `url`, as
    ENTITY/PROJECT/SWEEP_ID, so that `python -m trainer.sweep pause ID` reaches it."""
    entry = {"path": path, "url": url}
    if recorded_wandb(layout.root) != entry:
        layout.root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(layout.wandb_sweep, yaml.safe_dump(entry, sort_keys=False))


def recorded_wandb(sweep_dir: str | Path) -> dict[str, str] | None:
    """What a sweep directory records of its W&B sweep ({path, url}), if it is a W&B one."""
    path = SweepLayout(Path(sweep_dir)).wandb_sweep
    if not path.is_file():
        return None
    found = yaml.safe_load(path.read_text()) or {}
    if not isinstance(found, dict) or str(found.get("path", "")).count("/") != 2:
        raise TrainerError(f"{path}: give path (ENTITY/PROJECT/SWEEP_ID) and url (the W&B server)")
    return {"path": str(found["path"]), "url": str(found.get("url") or "")}


def wandb_sweep(value: str, root: str | Path) -> dict[str, str] | None:
    """The W&B sweep ({path, url}; url "" for the environment's) that `value` names: a sweep
    directory or a local id recording one, or a W&B path ENTITY/PROJECT/SWEEP_ID that is no
    local directory; None for a local sweep (or none at all)."""
    path = Path(value).expanduser()
    for folder in (path, SweepLayout.under(root, value).root if "/" not in value else None):
        if folder is not None and SweepLayout(folder).wandb_sweep.is_file():
            return recorded_wandb(folder)
    parts = value.split("/")
    if len(parts) == 3 and all(parts) and not path.exists():
        return {"path": value, "url": ""}
    return None


class UnknownSweep(TrainerError):
    """A sweep id or directory with no local sweep store; the message names `key` and the
    known sweeps (exit 2: nothing ran)."""

    def __init__(self, key: str, value: str, root: str | Path) -> None:
        sweeps = SweepLayout.sweeps_dir(root)
        ids = [sweep_id for sweep_id, _ in known(root)]
        listing = (
            f"the local sweeps there are: {', '.join(ids)}"
            if ids
            else "there are no local sweeps there"
        )
        close = difflib.get_close_matches(str(value), ids, n=1)
        listing = f"did you mean {close[0]}? {listing}" if close else listing
        super().__init__(
            f"{key}={value}: no local sweep {value!r} under {sweeps}, nor a sweep directory "
            f"(one holding sweep.db or storage.yaml) at that path; {listing} (list them with python -m "
            "trainer.sweep ls). Check the id or the directory, and the output root (--root, or "
            "TRAINER_OUTPUT_DIR / paths.output_dir)."
        )


def output_root() -> Path:
    """Where sweeps live by default: conf/paths/default.yaml's output_dir, resolved."""
    return default_output_root()


ID_CHARS = string.ascii_lowercase + string.digits


def new_id() -> str:
    """A short random id as W&B makes them (`wandb.util.generate_id`: 8 base-36 digits from
    `secrets`), without importing W&B, which an agent may not otherwise need."""
    return "".join(secrets.choice(ID_CHARS) for _ in range(8))


def sweep_id_of(store: SweepStore, layout: SweepLayout) -> str:
    """The id recorded in the store (sweeps made before ids were recorded: the folder name)."""
    return store.get("sweep_id") or layout.root.name


def _held_id(layout: SweepLayout) -> str:
    """The id of the sweep a directory holds: the one its storage.yaml records, else its
    sweep.db's."""
    server = recorded(layout.root)
    if server is not None:
        return server["sweep_id"] or layout.root.name
    store = SweepStore(layout.db)
    try:
        return sweep_id_of(store, layout)
    finally:
        store.close()


def create(root: str | Path, sweep_id: str, directory: str | Path | None) -> SweepLayout:
    """The folder of a new sweep: `directory` (the user's hydra.sweep.dir, linked from
    <root>/sweeps/<id> so the id finds it) or <root>/sweeps/<id>/. A folder that already holds
    a sweep is refused."""
    layout = (
        SweepLayout(Path(directory).resolve()) if directory else SweepLayout.under(root, sweep_id)
    )
    if layout.exists():
        other = _held_id(layout)
        raise TrainerError(
            f"hydra.sweep.dir={layout.root} already holds sweep {other}: resume it with "
            f"hydra.sweeper.sweep_id={other}, or set hydra.sweep.dir to a new directory."
        )
    layout.root.mkdir(parents=True, exist_ok=True)
    home = SweepLayout.under(root, sweep_id).root
    if directory and home.resolve() != layout.root:
        home.parent.mkdir(parents=True, exist_ok=True)
        home.symlink_to(layout.root, target_is_directory=True)
    return layout


def find(key: str, value: str | Path, root: str | Path) -> SweepLayout:
    """The sweep named by `value`: a sweep directory, or an id under <root>/sweeps/ (which may
    link to the hydra.sweep.dir it was created in). UnknownSweep names `key` otherwise."""
    path = Path(value).expanduser()
    if SweepLayout(path).exists():
        return SweepLayout(path.resolve())
    by_id = SweepLayout.under(root, str(value))
    if "/" not in str(value) and by_id.exists():
        return SweepLayout(by_id.root.resolve())
    raise UnknownSweep(key, str(value), root)


def known(root: str | Path) -> list[tuple[str, SweepLayout]]:
    """(id, layout) of every local sweep under <root>/sweeps/, oldest first, each once."""
    found: dict[Path, str] = {}
    sweeps = SweepLayout.sweeps_dir(root)
    found_in = [*sweeps.glob("*/sweep.db"), *sweeps.glob("*/storage.yaml")]
    dbs = sorted(found_in, key=lambda p: p.stat().st_mtime)
    for db in dbs:
        found.setdefault(db.parent.resolve(), db.parent.name)
    return [(sweep_id, SweepLayout(path)) for path, sweep_id in found.items()]


def join_command(sweep_id: str, root: str | Path, directory: str | Path | None = None) -> str:
    """The command that joins this sweep from another terminal: by id (with --root unless it is
    ./outputs with no $TRAINER_OUTPUT_DIR), or by directory when the sweep lives in its own
    hydra.sweep.dir."""
    if directory is not None:
        default = SweepLayout.under(root, sweep_id).root
        if not default.exists() or default.resolve() != Path(directory).resolve():
            return f"python -m trainer.agent {directory}"
    command = f"python -m trainer.agent {sweep_id}"
    # Another terminal may lack $TRAINER_OUTPUT_DIR: a root it gave is named too.
    plain_default = Path("outputs").resolve()
    if Path(root).resolve() != plain_default or os.environ.get("TRAINER_OUTPUT_DIR"):
        command += f" --root {root}"
    return command


# Keys of a sweep configuration that only this project's local backend runs: sweep.yaml gives
# them as comments above W&B's configuration (W&B's schema admits no other keys).
LOCAL_ONLY = {
    "pbt": "population-based training (hydra.sweeper.method=pbt) runs on the local backend; "
    "W&B runs this file as a random search of the members' starting values",
}


def wandb_view(config: dict) -> dict:
    """The sweep configuration as W&B's schema takes it (the local-only keys left out)."""
    return {k: v for k, v in config.items() if k not in LOCAL_ONLY}


def write_sweep_yaml(config: dict, path: str | Path) -> None:
    """Write exactly the W&B sweep configuration (what `wandb sweep sweep.yaml` accepts), with the
    local-only keys as comments above it."""
    notes = "".join(
        f"# {key}: {json.dumps(config[key], sort_keys=True)}\n"
        + textwrap.fill(why, 79, initial_indent="#   ", subsequent_indent="#   ")
        + "\n"
        for key, why in LOCAL_ONLY.items()
        if key in config
    )
    write_text_atomic(path, notes + yaml.safe_dump(wandb_view(config), sort_keys=False))
