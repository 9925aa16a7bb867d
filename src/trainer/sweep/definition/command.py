"""The trial command of a sweep, in one place: the `command` line written into the W&B sweep
configuration, its expansion the way `wandb agent` expands it, and the arguments every trial
gets (the user's config dir and name, and the fixed overrides)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from hydra_plugins.wandb_sweeper.config import RunnerConf

ARGS_MACRO = "${args_no_hyphens}"  # where `wandb agent` puts `key=value` of each parameter
ENTRY = ["-m", "trainer"]  # the entry point every trial runs
TORCHRUN = ["-m", "torch.distributed.run"]  # torchrun, as a module of the trial's interpreter


def _is_macro(chunk: str) -> bool:
    return chunk.startswith("${") and chunk.endswith("}")


def trial_command(
    fixed: Iterable[str],
    config_args: Iterable[str] = (),
    gpus_per_trial: int = RunnerConf.gpus_per_trial,
) -> list[str]:
    """The `command` W&B's agent runs: `python -m trainer [config args] key=value ... <fixed>`;
    config args (`--config-dir=...`) come first, where Hydra's parser wants its options. A trial
    on several GPUs runs through torchrun (`python -m torch.distributed.run`, the same program,
    from the same environment) with DDP; `--standalone` gives it its own free port."""
    launcher: list[str] = []
    if isinstance(gpus_per_trial, int) and gpus_per_trial > 1:  # a bad value is reported apart
        launcher = [*TORCHRUN, "--standalone", f"--nproc_per_node={gpus_per_trial}"]
        fixed = ["trainer.strategy=ddp", *fixed]
    return [
        "${env}",
        "${interpreter}",
        *launcher,
        *ENTRY,
        *config_args,
        ARGS_MACRO,
        *fixed,
        "hydra.mode=RUN",
    ]


# The command line's Hydra settings that are the sweep's own, not a trial's: the sweep (its
# sweeper, launcher, mode and sweep dir) and the run dir, which the agent sets for each trial.
SWEEP_OWN_KEYS = ("hydra.sweeper", "hydra.launcher", "hydra.sweep", "hydra.mode", "hydra.run")
SWEEP_OWN_GROUPS = ("hydra/sweeper", "hydra/launcher")


def _override_target(override: str) -> str:
    """The key or config group a command-line override sets: `+hydra.a.b=1` -> hydra.a.b,
    `~hydra.a` -> hydra.a, `hydra/sweeper@hydra.sweeper=wandb` -> hydra/sweeper."""
    return override.split("=", 1)[0].lstrip("+~").split("@", 1)[0].strip()


def is_sweep_own(override: str) -> bool:
    """Whether a Hydra override of the sweep's command line stays the sweep's (hydra.sweeper.*,
    hydra.launcher.*, hydra.sweep.*, hydra.mode, hydra.run.*, hydra/sweeper=, hydra/launcher=)
    instead of reaching every trial."""
    target = _override_target(override)
    return any(target == k or target.startswith(f"{k}.") for k in SWEEP_OWN_KEYS) or any(
        target == g or target.startswith(f"{g}/") for g in SWEEP_OWN_GROUPS
    )


def trial_hydra_overrides(hydra_overrides: Iterable[str]) -> list[str]:
    """The command line's Hydra overrides every trial gets, in their order and as typed (each
    one argv item, no shell on the way: a trial's Hydra parses it as the sweep's did), all but
    the sweep's own. A ListConfig (hydra.overrides.hydra itself) is read unresolved, as Hydra's
    own sweeps pass it on: `${...}` is resolved in the trial."""
    if OmegaConf.is_config(hydra_overrides):
        hydra_overrides = OmegaConf.to_container(hydra_overrides, resolve=False)
    return [str(o) for o in hydra_overrides if not is_sweep_own(str(o))]


def config_arguments(
    sources: Iterable[Mapping[str, Any]],
    config_name: str | None,
    hydra_overrides: Iterable[str],
    *,
    default_conf: str,
    default_name: str = "train",
) -> list[str]:
    """What a trial needs to compose the sweep's own configuration: `--config-path` when the
    primary config dir is not `default_conf`, `--config-dir` for each added dir, `--config-name`
    when it is not `default_name`, and the command line's Hydra settings but the sweep's own
    (trial_hydra_overrides: hydra.searchpath, hydra/job_logging=..., hydra.job.chdir=...).
    `sources` are hydra.runtime.config_sources, `hydra_overrides` hydra.overrides.hydra."""
    args: list[str] = []
    for source in sources:
        if source.get("schema") != "file":
            continue
        path = str(source.get("path"))
        if (
            source.get("provider") == "main"
            and Path(path).resolve() != Path(default_conf).resolve()
        ):
            args.append(f"--config-path={Path(path).resolve()}")
        elif source.get("provider") == "command-line":
            args.append(f"--config-dir={Path(path).resolve()}")
    if config_name and config_name != default_name:
        args.append(f"--config-name={config_name}")
    return args + trial_hydra_overrides(hydra_overrides)


def expand_trial_command(
    config: Mapping[str, Any], params: Mapping[str, Any], run_dir: Path
) -> list[str]:
    """The sweep's `command` expanded exactly as `wandb agent` expands it, plus the run dir."""
    # lazy: wandb costs 0.6 s at start-up; `python -m trainer.sweep ls` never expands a command
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = sweep_utils.create_sweep_command(list(config.get("command") or []))
    sweep_vars = sweep_utils.create_sweep_command_args(
        {"args": {k: {"value": v} for k, v in params.items()}}
    )
    sweep_vars["interpreter"] = [sys.executable]
    sweep_vars["program"] = [config.get("program", "")]
    sweep_vars["env"] = ["/usr/bin/env"]
    argv: list[str] = []
    for chunk in map(str, command):
        argv += (sweep_vars.get(chunk[2:-1]) or []) if _is_macro(chunk) else [chunk]
    return [*argv, f"hydra.run.dir={run_dir}"]


def fixed_overrides(config: Mapping[str, Any]) -> list[str]:
    """The arguments of `command` that every trial gets: everything after the entry point
    (`-m trainer`, or `${program}`) that is not a macro, config args included."""
    command = [str(c) for c in config.get("command") or []]
    if "-m" in command:  # the last module: the trainer (torchrun's comes before it)
        command = command[len(command) - command[::-1].index("-m") + 1 :]
    elif "${program}" in command:
        command = command[command.index("${program}") + 1 :]
    elif ARGS_MACRO in command:
        command = command[command.index(ARGS_MACRO) + 1 :]
    return [c for c in command if not _is_macro(c)]
