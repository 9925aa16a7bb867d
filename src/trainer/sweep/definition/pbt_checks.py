"""Before a PBT sweep launches (hydra.sweeper.method=pbt): its settings, and every parameter a
member could not change in place without rebuilding or recompiling, named with the fix."""

from __future__ import annotations

from typing import Any

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.sweep.definition.translate import flatten_parameters
from trainer.sweep.search import pbt_policy as policy


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def setting_problems(settings: dict[str, Any], max_epochs: int | None) -> list[str]:
    """population, interval, quantile and resample_probability."""
    problems = []
    population, interval = settings.get("population"), settings.get("interval")
    if not isinstance(population, int) or population < 2:
        problems.append(
            f"hydra.sweeper.pbt.population={population!r} must be an integer >= 2: the members "
            "trained side by side (each is one run)"
        )
    if not isinstance(interval, int) or interval < 1:
        problems.append(
            f"hydra.sweeper.pbt.interval={interval!r} must be a whole number of epochs >= 1"
        )
    elif max_epochs is not None and interval >= max_epochs:
        problems.append(
            f"hydra.sweeper.pbt.interval={interval} leaves no decision before the end of "
            f"trainer.max_epochs={max_epochs}: set the interval below it (e.g. "
            f"hydra.sweeper.pbt.interval={max(max_epochs // 4, 1)}) or train longer"
        )
    quantile = settings.get("quantile")
    if not _number(quantile) or not 0 < quantile <= 0.5:
        problems.append(
            f"hydra.sweeper.pbt.quantile={quantile!r} must be above 0 and at most 0.5: the "
            "share of members that copy (the bottom) and are copied (the top)"
        )
    resample = settings.get("resample_probability")
    if not _number(resample) or not 0 <= resample <= 1:
        problems.append(
            f"hydra.sweeper.pbt.resample_probability={resample!r} must be between 0 and 1"
        )
    return problems


def parameter_problems(parameters: dict[str, Any]) -> list[str]:
    """Keys a member cannot change in place, and distributions PBT cannot perturb."""
    problems = []
    kinds = ", ".join(policy.CONTINUOUS)
    for key, spec in flatten_parameters(parameters).items():
        if not isinstance(spec, dict) or "value" in spec:
            continue  # the same value for every member
        if key not in policy.KEYS:
            problems.append(
                f"hydra.sweeper.parameters.{key} cannot be a PBT parameter: members change their "
                f"values in place mid-run, and a new {key} would change a shape, the model or a "
                f"compiled graph. PBT explores {', '.join(policy.KEYS)}; give {key} one value "
                f"for every member ({key}=<value>) or search it with another method"
            )
        elif "values" not in spec and spec.get("distribution", "uniform") not in policy.CONTINUOUS:
            problems.append(
                f"hydra.sweeper.parameters.{key}: PBT perturbs a value x0.8 or x1.2 within its "
                f"bounds, so it takes values: [...] or a distribution among {kinds}, not "
                f"{spec.get('distribution')}"
            )
    if not policy.swept(flatten_parameters(parameters)):
        problems.append(
            "hydra.sweeper.method=pbt needs at least one parameter to explore, e.g. "
            "hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, min: "
            "0.001, max: 0.5}}"
        )
    return problems


def compiled_update_problems(parameters: dict[str, Any]) -> list[str]:
    """Under compile.optimizer the compiled update holds every setting but the learning rate as
    a constant: a new weight decay or momentum would recompile it."""
    swept = policy.swept(flatten_parameters(parameters))
    return [
        f"hydra.sweeper.parameters.{key} cannot be a PBT parameter with compile.optimizer=true: "
        f"the compiled optimizer update holds {key} as a constant, so each new value would "
        "recompile it (the learning rate is a tensor and does not). Set compile.optimizer=false "
        f"(the model stays compiled), or give {key} one value for every member"
        for key in ("optimizer.weight_decay", "optimizer.momentum")
        if key in swept
    ]


def problems(
    config: dict[str, Any],
    backend: str,
    max_epochs: int | None,
    gpus_per_trial: int,
    compiled_update: bool = False,
    repeats: int = RunnerConf.repeats,
) -> list[str]:
    """Every reason the PBT sweep `config` cannot run as asked (none for other methods);
    `compiled_update`: the trials compile the optimizer's update (compile.optimizer)."""
    if not policy.is_pbt(config):
        return []
    found = setting_problems(policy.settings_of(config), max_epochs)
    found += parameter_problems(config.get("parameters") or {})
    if not (config.get("metric") or {}).get("name"):
        found.append(
            "hydra.sweeper.method=pbt ranks members by the sweep metric: set "
            "hydra.sweeper.metric.name=val/acc hydra.sweeper.metric.goal=maximize"
        )
    if compiled_update:
        found += compiled_update_problems(config.get("parameters") or {})
    if backend == "wandb":
        found.append(
            "hydra.sweeper.method=pbt runs with backend=local only: the W&B server chooses runs "
            "from its own methods and cannot tell a running member to load another member's "
            "checkpoint; drop backend=wandb (several machines share a local sweep through "
            "hydra.sweeper.storage=postgresql://...)"
        )
    if config.get("early_terminate"):
        found.append(
            "hydra.sweeper.early_terminate does not go with method=pbt: lagging members already "
            "copy the leaders instead of stopping; drop early_terminate"
        )
    population = policy.settings_of(config)["population"]
    if config.get("run_cap") != population:
        found.append(
            f"hydra.sweeper.run_cap={config.get('run_cap')} does not go with method=pbt: the "
            f"sweep trains hydra.sweeper.pbt.population={population} members; drop run_cap"
        )
    if config.get("metrics"):
        found.append(
            "hydra.sweeper.metrics: PBT ranks members by one metric; set metric: {name, goal}"
        )
    if repeats != 1:
        found.append(
            f"hydra.sweeper.repeats={repeats} does not go with method=pbt: members copy each "
            "other, so their seeds are not independent repeats; drop repeats (or search "
            "with random, grid or bayes and repeats)"
        )
    if gpus_per_trial > 1:
        found.append(
            "hydra.sweeper.gpus_per_trial above 1 does not go with method=pbt: a member trains in "
            "one process; use gpus_per_trial=1"
        )
    return found
