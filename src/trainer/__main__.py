"""`python -m trainer [overrides]`: the Hydra entry point; all work happens in `run(cfg)`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from trainer.errors import exit_on_error
from trainer.layout import conf_dir


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="train")
@exit_on_error  # a TrainerError: its one paragraph on stderr and its exit code (stops: 128+N)
def main(cfg: DictConfig) -> float | None:
    from trainer.config import ConfigError
    from trainer.run import run

    try:
        return run(cfg)["best"]
    except ConfigError:
        _remove_rejected_run_dir()
        raise


def _remove_rejected_run_dir() -> None:
    """A run rejected before it started leaves no directory behind: remove Hydra's run folder
    when it holds only what Hydra wrote (.hydra/, the log), and its date folder once empty."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra = HydraConfig.get()
    if hydra.mode != RunMode.RUN:
        return
    root = Path(hydra.runtime.output_dir)
    if not root.is_dir() or any(
        p.name not in (".hydra", f"{hydra.job.name}.log") for p in root.iterdir()
    ):
        return
    shutil.rmtree(root)
    if root.parent.is_dir() and not any(root.parent.iterdir()):
        root.parent.rmdir()


def cli() -> None:
    """The console entry: a sweep trial's argv gets its exact values, the torchrun ranks agree
    on one run directory (both no-ops otherwise), then Hydra runs."""
    from trainer.paths import expand_path_argv
    from trainer.trial_argv import repair_sys_argv

    sys.argv = expand_path_argv(repair_sys_argv(sys.argv))  # `~`, `$HOME` in path keys
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.distributed import agree_run_time

        agree_run_time()
    main()


if __name__ == "__main__":
    cli()
