"""Where a run's things live: the default output and cache roots and the files of a run
directory (each of its file names is spelled here and nowhere else); the atomic write every
result file goes through."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


def _default_path(name: str) -> Path:
    """conf/paths/default.yaml's `name` over the schema's default (PathsConfig), resolved."""
    # lazy: omegaconf and the schemas cost 0.13 s at start-up; cache/env.py (agents read it)
    # stays light
    from omegaconf import OmegaConf

    from trainer.config.paths import conf_dir
    from trainer.config.schema import PathsConfig

    own = OmegaConf.load(Path(conf_dir()) / "paths" / "default.yaml")
    own.pop("defaults", None)
    return Path(OmegaConf.merge(OmegaConf.structured(PathsConfig), own)[name]).expanduser()


def default_output_root() -> Path:
    """Where runs and sweeps go by default (paths.output_dir: $TRAINER_OUTPUT_DIR, outputs)."""
    return _default_path("output_dir")


def sweeps_root(output_root: str | Path) -> Path:
    """Where an output root keeps its sweeps, one folder per sweep id (trainer.sweep's
    SweepLayout holds each sweep directory's files)."""
    return Path(output_root) / "sweeps"


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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a reader (another agent,
    a crash) sees the old file or the new one, never half of it. The file gets the permissions
    a plain write would (0666 less the umask), not mkstemp's 0600: teammates can read results."""
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
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
