"""What `hydra/sweeper=wandb` does: translate, validate, then dry-run or hand the sweep to a backend."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf

from trainer import cpu_share
from trainer.config import ConfigError, flatten, validate
from trainer.sweep.local import write_sweep_yaml
from trainer.sweep.translate import TranslationError, build_sweep_config, run_count
from trainer.sweep.validate import check_sweep


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


def sweep_yaml(config: dict[str, Any]) -> str:
    """The sweep.yaml text, written by the same function the export uses."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.yaml"
        write_sweep_yaml(config, path)
        return path.read_text()


def runner_problems(options: dict[str, Any]) -> list[str]:
    """Problems of how the sweep is run: agents and count."""
    problems = []
    agents, count = options.get("agents"), options.get("count")
    least = 0 if options.get("backend") == "wandb" else 1
    if not isinstance(agents, int) or isinstance(agents, bool) or agents < least:
        problems.append(
            f"hydra.sweeper.agents={agents!r} must be an integer >= {least} "
            "(0 only with backend=wandb, where it creates the sweep and starts no agent)"
        )
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count <= 0):
        problems.append(
            f"hydra.sweeper.count={count!r} must be a positive number of runs per agent, "
            "or left out (null) to run until the sweep ends"
        )
    return problems + cpu_share.sweep_problems(options)


def trial_config_problems(sweep_config: dict[str, Any], config: DictConfig) -> list[str]:
    """The problem trainer.config.validate finds in the trials' fixed config: the composed
    config (fixed overrides applied), with each plain key swept over listed values set to its
    first value; keys drawn from distributions keep their composed value."""
    trial = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    trial.pop("hydra", None)
    groups = set(config.hydra.runtime.choices)
    for key, spec in (sweep_config.get("parameters") or {}).items():
        if key in groups or not isinstance(spec, dict):
            continue
        if "value" in spec:
            OmegaConf.update(trial, key, spec["value"], force_add=True)
        elif spec.get("values"):
            OmegaConf.update(trial, key, spec["values"][0], force_add=True)
    try:
        validate(trial)
    except ConfigError as err:
        return [f"every trial would fail: {err}"]
    return []


def agent_failure(result: dict[str, Any]) -> str | None:
    """The error for a sweep whose agents gave up or failed, or None when all exited 0."""
    codes = result.get("agent_exit_codes") or []
    failed = [code for code in codes if code != 0]
    if not failed:
        return None
    return (
        f"{len(failed)} of {len(codes)} agent(s) of sweep {result.get('sweep_id')} gave up or "
        f"failed (exit codes {codes}); their message above names the failed runs and logs. "
        "Fix the cause and resume with hydra.sweeper.sweep_id="
        f"{result.get('sweep_id')}."
    )


def prepare(
    options: dict[str, Any], config: DictConfig, hydra_context: HydraContext, arguments: list[str]
) -> dict[str, Any]:
    """The validated W&B sweep configuration; ConfigError lists every problem."""
    try:
        sweep_config = build_sweep_config(options, arguments)
    except TranslationError as err:
        raise ConfigError(str(err)) from err
    check_sweep(
        sweep_config,
        config_keys(config),
        config_groups(config, hydra_context),
        [*runner_problems(options), *trial_config_problems(sweep_config, config)],
    )
    return sweep_config


def sweep(
    options: Any, config: DictConfig, hydra_context: HydraContext, arguments: list[str]
) -> Any:
    options = {
        k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
        for k, v in options.items()
    }
    try:
        sweep_config = prepare(options, config, hydra_context, arguments)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if options["dry_run"]:
        print(sweep_yaml(sweep_config), end="")
        print(f"# runs: {run_count(sweep_config)}")
        return None
    if options["backend"] == "wandb":
        from trainer.sweep.wandb_server import ServerUnavailable, run_server_sweep

        logger = config.get("logger") or {}
        try:
            result = run_server_sweep(
                sweep_config,
                project=options["project"] or logger.get("project"),
                entity=options["entity"] or logger.get("entity"),
                sweep_id=options["sweep_id"],
                agents=options["agents"],
                count=options["count"],
                root=Path(config.paths.output_dir),
                cpus_per_trial=options["cpus_per_trial"],
            )
        except ServerUnavailable as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
        return _finish(result)
    if options["backend"] != "local":
        print(
            f"error: hydra.sweeper.backend={options['backend']!r} is not a backend; "
            "use local or wandb",
            file=sys.stderr,
        )
        sys.exit(2)
    from trainer.sweep.agent import UnknownSweep
    from trainer.sweep.local import run_sweep

    try:
        result = run_sweep(
            sweep_config,
            root=config.paths.output_dir,
            sweep_id=options["sweep_id"],
            agents=options["agents"],
            count=options["count"],
            rerun_crashed=options["rerun_crashed"],
            max_consecutive_failures=options["max_consecutive_failures"],
            cpus_per_trial=options["cpus_per_trial"],
        )
    except UnknownSweep as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    return _finish(result)


def _finish(result: dict[str, Any]) -> dict[str, Any]:
    """Exit 1 when an agent gave up or failed; otherwise return the sweep's result."""
    failure = agent_failure(result)
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        sys.exit(1)
    return result
