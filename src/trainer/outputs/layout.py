"""Where things live: the files of a run directory and of a
sweep directory. Every file name is spelled here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def _default_path(name: str) -> Path:
    """conf/paths/default.yaml's `name` over the schema's default (PathsConfig), resolved."""
    from omegaconf import OmegaConf

    from trainer.config.paths import conf_dir
    from trainer.config.schema import PathsConfig

    own = OmegaConf.load(Path(conf_dir()) / "paths" / "default.yaml")
    own.pop("defaults", None)
    return Path(OmegaConf.merge(OmegaConf.structured(PathsConfig), own)[name]).expanduser()


def default_output_root() -> Path:
    """Where runs and sweeps go by default (paths.output_dir: $TRAINER_OUTPUT_DIR, outputs)."""
    return _default_path("output_dir")


def default_cache_root() -> Path:
    """The compile cache every run shares by default (paths.cache_dir: $TRAINER_CACHE_DIR)."""
    return _default_path("cache_dir")


@dataclass(frozen=True)
class RunLayout:
    """The files of one run directory (a Hydra run dir, or a sweep trial's runs/<id>/)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "last.pt"

    @property
    def best(self) -> Path:
        return self.checkpoints / "best.pt"

    def checkpoint(self, name: str) -> Path:
        return self.checkpoints / name

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def compile_trace(self) -> Path:
        """torch's compile trace (compile.trace=true): TORCH_TRACE's log files."""
        return self.root / "compile_trace"

    @property
    def compile_report(self) -> Path:
        """tlparse's report of the compile trace (its index.html)."""
        return self.compile_trace / "report" / "index.html"


@dataclass(frozen=True)
class SweepLayout:
    """The files of one local sweep directory (`hydra.sweep.dir`, or <output>/sweeps/<id>/)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def under(cls, output_root: str | Path, sweep_id: str) -> SweepLayout:
        """The default place of a sweep: <output root>/sweeps/<sweep id>/."""
        return cls(Path(output_root) / "sweeps" / sweep_id)

    @staticmethod
    def sweeps_dir(output_root: str | Path) -> Path:
        return Path(output_root) / "sweeps"

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
        """The sweep's compile-cache bundle (trainer.cache.bundle, laid out by BundleLayout)."""
        return self.root / "compile_cache"

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


@dataclass(frozen=True)
class BundleLayout:
    """A compile-cache bundle: one part per machine key (`key.json`), holding the cache files
    (as under a cache dir: inductor/, triton/) and one record per workload that added files.
    `in_cache`: a cache dir's own records (<cache>/bundle/<key>/), its files at the cache root."""

    root: Path
    in_cache: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a reader (another agent,
    a crash) sees the old file or the new one, never half of it. The file gets the permissions
    a plain write would (0666 less the umask), not mkstemp's 0600: teammates can read results."""
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """This process's umask (read by setting it, the only way, and setting it back)."""
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask
