"""`python -m trainer [overrides]`: the Hydra entry point; all work happens in `run(cfg)`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from trainer.config.hydra_version import VERSION_BASE, mode_without_composing
from trainer.config.overrides import COMMANDS, check_overrides, chosen, parse_argv
from trainer.config.paths import conf_dir, expand_path_argv
from trainer.config.schema import ConfigError
from trainer.errors import exit_on_error
from trainer.trial.trial_argv import repair_sys_argv


@hydra.main(config_path=conf_dir(), config_name="train", **VERSION_BASE)
@exit_on_error  # a TrainerError: its one paragraph on stderr and its exit code (stops: 128+N)
def main(cfg: DictConfig) -> float | None:
    # lazy: torch and the training modules cost 1.2 s at start-up; --help, --cfg and a
    # refused override exit without them
    from trainer.run import run

    try:
        return run(cfg)["best"]
    except ConfigError:
        _remove_rejected_run_dir()
        raise


def _remove_rejected_run_dir() -> None:
    """A run rejected before it started leaves no directory behind: remove Hydra's run folder
    when it holds only what Hydra wrote (.hydra/, the log), and its date folder once empty."""
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


def sweep_as_multirun(argv: list[str]) -> list[str]:
    """`python -m trainer sweep=<name>` runs the sweep definition <name>: argv with a `sweep=`
    choice gets --multirun, unless the command line chose already (-m, --run, --cfg, --info,
    --help, hydra.mode=, as a sweep's trials do with hydra.mode=RUN). Hydra 1.3 took the mode
    from the definition's `hydra.mode: MULTIRUN`; Hydra 1.4 takes hydra.mode only from the
    primary config and the command line, and stops when a config group changes it."""
    parsed = parse_argv(argv)
    if parsed is None:
        return argv
    args, overrides = parsed
    if any(getattr(args, flag, None) for flag in COMMANDS) or args.experimental_rerun:
        return argv
    keys = {o.key_or_group for o in overrides}
    if "hydra.mode" in keys or any(
        o.key_or_group == "hydra" and isinstance(o.value(), dict) for o in overrides
    ):
        return argv
    chosen = [
        o
        for o in overrides
        if o.key_or_group == "sweep" and o.package is None and not o.is_delete()
    ]
    if chosen and not chosen[-1].is_sweep_override() and chosen[-1].value() is not None:
        return [argv[0], "--multirun", *argv[1:]]
    return argv


@exit_on_error
def _check_overrides(argv: list[str]) -> None:
    check_overrides(argv)


@exit_on_error
def _refuse_torchrun_misuse(argv: list[str]) -> None:
    # lazy: torch costs 1.2 s at start-up; only torchrun ranks (WORLD_SIZE > 1) need it
    from trainer.hardware.distributed import refuse_misuse

    strategy = chosen(argv, "trainer.strategy")
    if strategy is not None:
        refuse_misuse(str(strategy))


def cli() -> None:
    """The console entry: a sweep trial's argv gets its exact values, a sweep definition runs as
    a sweep, the torchrun ranks agree on one run directory (each a no-op otherwise), then Hydra
    runs."""
    sys.argv = expand_path_argv(repair_sys_argv(sys.argv))  # `~`, `$HOME` in path keys
    sys.argv = sweep_as_multirun(sys.argv)  # `sweep=<name>` without -m, on Hydra 1.3 and 1.4
    _check_overrides(sys.argv)  # a typo'd key or group option: our paragraph, not Hydra's
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # lazy: torch costs 1.2 s at start-up; only torchrun ranks (WORLD_SIZE > 1) need it
        from trainer.hardware.distributed import agree_run_time

        _refuse_torchrun_misuse(sys.argv)  # before any rank writes or logs into a run dir
        agree_run_time()
    mode_without_composing()  # Hydra 1.3: a trial's hydra.mode=RUN, read without composing
    main()


if __name__ == "__main__":
    cli()
