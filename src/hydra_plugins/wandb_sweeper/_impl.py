"""What `hydra/sweeper=wandb` does: translate, validate, then dry-run or hand the sweep to a backend."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.conf import HydraConf
from hydra.errors import HydraException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hydra_plugins.wandb_sweeper.config import WandbSweeperConf
from trainer.config.paths import conf_dir
from trainer.config.schema import ConfigError, flatten
from trainer.errors import TrainerError, exit_on_error
from trainer.outputs.layout import default_output_root
from trainer.preflight import validate
from trainer.sweep.agents import cpu_share, gpu_slots
from trainer.sweep.agents.launched import BASIC, LauncherJobs, launcher_name, launcher_problem
from trainer.sweep.agents.outcome import agent_failure
from trainer.sweep.definition.command import config_arguments, fixed_overrides
from trainer.sweep.definition.custom_checks import check as scheduler_check
from trainer.sweep.definition.custom_checks import definition_dirs, resolve_source
from trainer.sweep.definition.pbt_checks import problems as pbt_problems
from trainer.sweep.definition.problems import check_sweep
from trainer.sweep.definition.translate import (
    TranslationError,
    build_sweep_config,
    run_count,
    spelling_problems,
)
from trainer.sweep.local import run_sweep
from trainer.sweep.options import AgentHooks, SweepOptions
from trainer.sweep.prewarm import before_agents
from trainer.sweep.search import repeats as repeating
from trainer.sweep.store.directory import SweepLayout, write_sweep_yaml


def config_keys(config: DictConfig) -> list[str]:
    """The dotted keys of the composed config (without hydra.*)."""
    tree = OmegaConf.to_container(config, resolve=False)
    tree.pop("hydra", None)
    return list(flatten(tree))


def config_groups(config: DictConfig, hydra_context: HydraContext) -> dict[str, list[str]]:
    """The config groups of this app (not Hydra's own) with their options."""
    choices = config.hydra.runtime.choices
    loader = hydra_context.config_loader
    return {
        group: list(loader.get_group_options(group))
        for group in choices
        if not group.startswith("hydra/")
    }


def trial_config_args(config: DictConfig) -> list[str]:
    """The user's --config-dir/--config-path/--config-name and the command line's Hydra
    settings (unresolved, as the basic sweeper passes them), for every trial."""
    hydra = config.hydra
    return config_arguments(
        OmegaConf.to_container(hydra.runtime.config_sources, resolve=True),
        hydra.job.config_name,
        hydra.overrides.hydra,
        default_conf=conf_dir(),
    )


def _raw_sweep_dir(tree: Any) -> Any:
    """hydra.sweep.dir as written (interpolations unresolved), or None."""
    tree = OmegaConf.to_container(tree, resolve=False) if OmegaConf.is_config(tree) else tree
    return ((tree.get("hydra") or {}).get("sweep") or {}).get("dir")


def user_sweep_dir(config: DictConfig) -> Path | None:
    """hydra.sweep.dir resolved when the user set it (command line, their config, a sweep
    definition), else None: the default of conf/train.yaml or of Hydra is not a choice."""
    on_command_line = any(o.startswith("hydra.sweep.dir=") for o in config.hydra.overrides.hydra)
    defaults = {
        HydraConf().sweep.dir,
        _raw_sweep_dir(OmegaConf.load(Path(conf_dir()) / "train.yaml")),
    }
    if on_command_line or _raw_sweep_dir(config) not in defaults:
        return Path(config.hydra.sweep.dir).resolve()
    return None


def _launcher_target(config: DictConfig) -> str | None:
    """The class hydra/launcher instantiates (None: no launcher configured)."""
    return OmegaConf.select(config, "hydra.launcher._target_", default=None)


def agent_jobs(config: DictConfig, hydra_context: HydraContext) -> LauncherJobs | None:
    """The agents as jobs of the user's Hydra launcher; None for basic (local processes)."""
    name = launcher_name(_launcher_target(config))
    return None if name in (BASIC, None) else LauncherJobs(hydra_context, config, name)


def runner_problems(options: SweepOptions) -> list[str]:
    """Problems of how the sweep is run: backend, agents, count, retries and CPUs per trial."""
    return options.problems() + cpu_share.cpus_per_trial_problems(options.cpus_per_trial)


def _first_values(sweep_config: dict[str, Any]) -> dict[str, Any]:
    """Each parameter with a listed value (`value`, or the first of `values`)."""
    first = {}
    for key, spec in (sweep_config.get("parameters") or {}).items():
        if isinstance(spec, dict) and "value" in spec:
            first[key] = spec["value"]
        elif isinstance(spec, dict) and spec.get("values"):
            first[key] = spec["values"][0]
    return first


def trial_config(
    sweep_config: dict[str, Any],
    config: DictConfig,
    hydra_context: HydraContext,
    values: dict[str, Any] | None = None,
) -> DictConfig:
    """The first trial's config (or the trial's with these parameter `values`), composed as a
    trial composes it: the sweeper's config source (the user's config dir included), its config
    name, the fixed overrides of `command`, each config group swept over listed options set to
    its first option; then each plain key swept over listed values set to its first value (keys
    drawn from distributions keep their value)."""
    groups = config_groups(config, hydra_context)
    first = _first_values(sweep_config) if values is None else values
    overrides = [a for a in fixed_overrides(sweep_config) if not a.startswith("--")]
    overrides += [
        f"{key}={value}" for key, value in first.items() if str(value) in groups.get(key, ())
    ]
    composed = hydra_context.config_loader.load_configuration(
        config.hydra.job.config_name, overrides, run_mode=RunMode.RUN
    )
    trial = OmegaConf.create(OmegaConf.to_container(composed, resolve=False))
    trial.pop("hydra", None)
    for key, value in first.items():
        if key not in groups:
            OmegaConf.update(trial, key, value, force_add=True)
    return trial


def trial_config_problems(
    sweep_config: dict[str, Any],
    config: DictConfig,
    hydra_context: HydraContext,
    gpus_per_trial: int,
) -> list[str]:
    """What trainer.preflight.validate finds in the trials' fully composed fixed config, and a
    global batch that the processes of a multi-GPU trial cannot split evenly."""
    try:
        trial = trial_config(sweep_config, config, hydra_context)
        validate(trial)
    except ConfigError as err:
        return [f"every trial would fail: {err}"]
    except (HydraException, OmegaConfBaseException) as err:
        return [f"every trial would fail to compose its config: {err}"]
    batch = OmegaConf.select(trial, "data.batch_size")
    if isinstance(gpus_per_trial, int) and gpus_per_trial > 1 and batch % gpus_per_trial:
        return [
            f"hydra.sweeper.gpus_per_trial={gpus_per_trial}: data.batch_size={batch} is the "
            "global batch and must divide by the number of processes; set "
            f"data.batch_size to a multiple of {gpus_per_trial}"
        ]
    return []


def prepare(
    sweeper: dict[str, Any],
    options: SweepOptions,
    config: DictConfig,
    hydra_context: HydraContext,
    arguments: list[str],
) -> tuple[dict[str, Any], gpu_slots.DevicePlan | None]:
    """The validated W&B sweep configuration of the sweeper's keys and the command line, and the
    device plan; ConfigError lists every problem."""
    try:
        sweep_config = build_sweep_config(sweeper, arguments, trial_config_args(config))
    except TranslationError as err:
        raise ConfigError(str(err)) from err
    runtime = config.hydra.runtime  # scheduler.source may sit next to the sweep definition
    sources = OmegaConf.to_container(runtime.config_sources, resolve=True)
    search = definition_dirs(OmegaConf.to_container(runtime.choices), sources)
    sweep_config = resolve_source(sweep_config, search)
    keys, groups = config_keys(config), config_groups(config, hydra_context)
    engine = scheduler_check(sweep_config, keys, groups, options.backend)
    for note in engine.notes:
        print(f"sweep: note: {note}", flush=True)
    device_plan, device_problems = gpu_slots.sweep_plan(options)
    trial = trial_config_problems(
        engine.trial_view(sweep_config), config, hydra_context, options.gpus_per_trial
    )
    problems = [
        *spelling_problems(sweeper),
        *runner_problems(options),
        *([launcher] if (launcher := launcher_problem(_launcher_target(config))) else []),
        *repeating.problems(options.repeats, sweep_config),
        *device_problems,
        *engine.problems,
        *pbt_problems(
            sweep_config,
            options.backend,
            OmegaConf.select(config, "trainer.max_epochs"),
            options.gpus_per_trial,
            _compiled_update(config),
            options.repeats,
        ),
        *trial,
    ]
    check_sweep(sweep_config, keys, groups, problems)
    return sweep_config, device_plan


def _compiled_update(config: DictConfig) -> bool:
    """Whether the trials compile the optimizer's update (compile.optimizer, compile on)."""
    return bool(OmegaConf.select(config, "compile.optimizer")) and not bool(
        OmegaConf.select(config, "compile.disable")
    )


def dry_run(
    sweep_config: dict[str, Any], directory: Path, repeats: repeating.Repeats | None = None
) -> None:
    """Print the W&B configuration and the number of runs (configurations x seeds with
    hydra.sweeper.repeats); write it as <directory>/sweep.yaml."""
    path = SweepLayout(directory).yaml
    write_sweep_yaml(sweep_config, path)
    print(path.read_text(), end="")
    print(f"# written to {path}: `wandb sweep {path}` creates this sweep on the W&B server")
    members = " (the PBT population: members)" if "pbt" in sweep_config else ""
    print(f"# runs: {repeating.runs_line(run_count(sweep_config), repeats)}{members}")


def with_repeats(
    sweep_config: dict[str, Any],
    options: SweepOptions,
    config: DictConfig,
    hydra_context: HydraContext,
) -> tuple[dict[str, Any], repeating.Repeats | None]:
    """hydra.sweeper.repeats > 1: the seeds start at the trials' configured trainer.seed; the
    local backend keeps them in its store, the W&B server gets trainer.seed as a parameter."""
    if options.repeats <= 1:
        return sweep_config, None
    first = int(OmegaConf.select(trial_config(sweep_config, config, hydra_context), "trainer.seed"))
    repeats = repeating.Repeats.of(options.repeats, first)
    if options.backend == "wandb":
        print(f"sweep: note: {repeating.server_note(sweep_config, repeats)}", flush=True)
        return repeating.for_server(sweep_config, repeats), None
    return sweep_config, repeats


def _run_server(sweep_config: dict[str, Any], launch: Launch) -> dict[str, Any]:
    # lazy: the server backend imports wandb (0.3 s at start-up); backend=local never loads it
    from trainer.sweep.server import ServerUnavailable, run_server_sweep

    try:
        return run_server_sweep(sweep_config, launch.options, **launch.where())
    except ServerUnavailable as err:  # nothing was started, but the sweep could not run
        raise TrainerError(str(err), exit_code=err.exit_code) from err


def prewarm_hook(
    sweep_config: dict[str, Any],
    options: SweepOptions,
    config: DictConfig,
    hydra_context: HydraContext,
):
    """hydra.sweeper.prewarm: the sweep's distinct workloads, found now (composed as trials
    compose them), compiled by the backend before its agents start; None when off."""
    if not options.prewarm:
        return None

    compose = lambda values: trial_config(sweep_config, config, hydra_context, values)  # noqa: E731
    return before_agents(sweep_config, options, compose)


def _run_local(sweep_config: dict[str, Any], launch: Launch) -> dict[str, Any]:
    return run_sweep(sweep_config, launch.options, repeats=launch.repeats, **launch.where())


@dataclass(frozen=True)
class Launch:
    """What the sweep command hands its backend besides the W&B configuration."""

    options: SweepOptions
    root: Path
    directory: Path | None
    devices: gpu_slots.DevicePlan | None
    hooks: AgentHooks
    repeats: repeating.Repeats | None = None  # backend=local: hydra.sweeper.repeats' seeds

    def where(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "directory": self.directory,
            "devices": self.devices,
            "hooks": self.hooks,
        }


def sweeper_keys(conf: WandbSweeperConf) -> dict[str, Any]:
    """The sweeper's keys as plain values (Hydra hands its blocks over as DictConfig)."""
    keys = OmegaConf.to_container(OmegaConf.structured(conf), resolve=True)
    keys.pop("_target_")
    return keys


@exit_on_error
def sweep(
    conf: WandbSweeperConf, config: DictConfig, hydra_context: HydraContext, arguments: list[str]
) -> Any:
    sweeper = sweeper_keys(conf)
    typed = SweepOptions.of(sweeper, config.get("logger") or {})
    root = Path(OmegaConf.select(config, "paths.output_dir") or default_output_root())
    try:
        sweep_config, devices = prepare(sweeper, typed, config, hydra_context, arguments)
    except KeyboardInterrupt:  # Ctrl-C during the checks: no traceback, nothing to keep
        raise TrainerError(
            "interrupted while checking the sweep; nothing was started or written",
            exit_code=128 + signal.SIGINT,
        ) from None
    sweep_config, repeats = with_repeats(sweep_config, typed, config, hydra_context)
    if typed.dry_run:
        return dry_run(sweep_config, Path(config.hydra.sweep.dir).resolve(), repeats)
    hooks = AgentHooks(
        prewarm_hook(sweep_config, typed, config, hydra_context), agent_jobs(config, hydra_context)
    )
    launch = Launch(typed, root, user_sweep_dir(config), devices, hooks, repeats)
    backend = _run_server if typed.backend == "wandb" else _run_local
    result = backend(sweep_config, launch)
    failure = agent_failure(result)
    if failure is not None:
        raise failure
    return result
