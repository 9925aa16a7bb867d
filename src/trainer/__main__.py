"""`python -m trainer [overrides]`: the Hydra entry point; all work happens in `run(cfg)`."""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from trainer.layout import conf_dir


@hydra.main(version_base="1.3", config_path=conf_dir(), config_name="train")
def main(cfg: DictConfig) -> float | None:
    from trainer.compile import CompileError
    from trainer.config import ConfigError
    from trainer.run import Interrupted, run

    try:
        result = run(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except CompileError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except Interrupted as stop:
        print(str(stop), file=sys.stderr)
        sys.exit(stop.exit_code)
    return result["best"]


def cli() -> None:
    """The console entry: a sweep trial's argv gets its exact values, the torchrun ranks agree
    on one run directory (both no-ops otherwise), then Hydra runs."""
    from trainer.sweep.trial_argv import repair_sys_argv

    sys.argv = repair_sys_argv(sys.argv)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainer.distributed import agree_run_time

        agree_run_time()
    main()


if __name__ == "__main__":
    cli()
