"""Sweep definitions and Hydra sweep syntax become one W&B sweep configuration (pure functions)."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
)
from hydra.errors import OverrideParseException

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.sweep.definition.command import trial_command
from trainer.sweep.search import pbt_policy
from trainer.sweep.search.distributions import MIN_MAX, grid_points
from trainer.sweep.search.space import flatten_parameters

# The top-level keys of a W&B sweep configuration that the sweeper config carries.
SWEEP_KEYS = (
    "name",
    "description",
    "method",
    "metric",
    "metrics",
    "scheduler",
    "early_terminate",
    "run_cap",
)
# Command-line overrides that concern the sweep itself, not the trials.
_SWEEPER_PREFIXES = ("hydra.sweeper", "hydra/sweeper", "hydra.mode", "hydra.sweep.")


class TranslationError(ValueError):
    """A command-line sweep the W&B schema cannot express."""


def spec_from_override(override: Override) -> dict[str, Any]:
    """The W&B parameter spec of one Hydra sweep override (`k=a,b`, choice, range, interval)."""
    value = override.value()
    if isinstance(value, ChoiceSweep):
        return {"values": list(value.list)}
    if isinstance(value, RangeSweep):
        return {"values": list(override.sweep_iterator())}
    if isinstance(value, IntervalSweep):
        start, end = value.start, value.end
        tags = set(value.tags)
        if not tags:
            if isinstance(start, int) and isinstance(end, int):
                return {"distribution": "int_uniform", "min": start, "max": end}
            return {"distribution": "uniform", "min": float(start), "max": float(end)}
        if tags == {"log"}:
            return {"distribution": "log_uniform_values", "min": start, "max": end}
        if len(tags) == 1 and next(iter(tags)) in MIN_MAX:
            return {"distribution": next(iter(tags)), "min": start, "max": end}
        raise TranslationError(
            f"{override.input_line}: tag(...) of an interval must be `log` or one of the W&B "
            f"distributions defined by min/max ({', '.join(MIN_MAX)}); "
            "write the others (q_*, normal, beta...) in the sweep config's `parameters`."
        )
    raise TranslationError(f"{override.input_line}: not a sweep override")


def _fixed_key(line: str) -> str:
    """The key (or config group) a fixed override `line` sets: `+a.b=1` -> a.b."""
    return line.lstrip("+~").split("=", 1)[0]


def params_overrides(params: Any) -> list[str]:
    """`hydra.sweeper.params` (Hydra's sweeper spelling: key -> a value in Hydra's override
    grammar, `choice(a, b)`, `tag(log, interval(1e-4, 1e-1))`, or a plain value every trial
    gets) as the overrides it stands for, checked one by one so that an error names its key."""
    if params is not None and not isinstance(params, dict):
        raise TranslationError(
            f"hydra.sweeper.params={params!r} must map Hydra keys to values in Hydra's override "
            "grammar, e.g. hydra.sweeper.params={optimizer.lr: 'tag(log, interval(1e-4, 1e-1))'}"
        )
    lines = []
    for key, value in (params or {}).items():
        text = "null" if value is None else str(value)
        line = f"{key}={text}"
        try:
            OverridesParser.create().parse_overrides([line])
        except OverrideParseException as err:
            why = [m for m in err.message.splitlines() if not m.startswith(("See ", "Error when"))]
            raise TranslationError(
                f"hydra.sweeper.params.{key}: {text!r} is not in Hydra's override grammar"
                + (f" ({'; '.join(why)})" if why else "")
                + "; write e.g. choice(a, b), range(1, 5), interval(0.1, 0.9) or "
                "tag(log, interval(1e-4, 1e-1))"
            ) from err
        lines.append(line)
    return lines


def spelling_problems(sweeper: dict[str, Any]) -> list[str]:
    """A search space written in both spellings at once: Hydra's `params` and W&B's
    `parameters` (the command line's `key=a,b` sweeps go with either)."""
    if sweeper.get("params") and sweeper.get("parameters"):
        return [
            "hydra.sweeper.params and hydra.sweeper.parameters are both set: write the search "
            "space in one of them, params in Hydra's override grammar (optimizer.lr: "
            "tag(log, interval(1e-4, 1e-1))) or parameters in W&B's spelling (optimizer.lr: "
            "{distribution: log_uniform_values, min: 1e-4, max: 0.1})"
        ]
    return []


def split_overrides(overrides: list[str]) -> tuple[list[str], dict[str, dict]]:
    """Command-line overrides -> (fixed overrides for every trial, swept parameters).

    Overrides of the sweeper itself (hydra.sweeper.*, hydra.mode) are dropped from both."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    fixed: list[str] = []
    swept: dict[str, dict] = {}
    for override in parsed:
        if override.input_line.lstrip("+~").startswith(_SWEEPER_PREFIXES):
            continue
        if override.is_sweep_override():
            swept[override.key_or_group] = spec_from_override(override)
        else:
            fixed.append(override.input_line)
    return fixed, swept


def sweep_metric(metric: Any) -> Any:
    """The sweeper's `metric` without its unset keys; None when nothing is set (no metric).
    Anything but a mapping is passed on for the schema check to name."""
    if not isinstance(metric, dict):
        return metric
    metric = {k: v for k, v in metric.items() if v is not None}
    return metric or None


def build_sweep_config(
    sweeper: dict[str, Any], overrides: list[str], config_args: list[str] = ()
) -> dict[str, Any]:
    """The W&B sweep configuration of a sweeper config plus the command line (which wins);
    `config_args` (the user's --config-dir/--config-name...) go into every trial's command.
    The search space comes from `parameters` (W&B's spelling), `params` (Hydra's sweepers'
    spelling, translated as the command line is) and the command line's sweeps."""
    fixed, swept = split_overrides(overrides)
    fixed_keys = {_fixed_key(line) for line in fixed}
    given = fixed_keys | set(swept)  # what the command line sets
    params_fixed, params_swept = split_overrides(params_overrides(sweeper.get("params")))
    parameters = {
        key: spec
        for key, spec in flatten_parameters(sweeper.get("parameters") or {}).items()
        if key not in fixed_keys
    }
    parameters.update({k: spec for k, spec in params_swept.items() if k not in fixed_keys})
    parameters.update(swept)
    fixed = [line for line in params_fixed if _fixed_key(line) not in given] + fixed
    config: dict[str, Any] = {}
    for key in SWEEP_KEYS:
        value = sweeper.get(key)
        if key == "metric":
            value = sweep_metric(value)
        elif key == "metrics" and isinstance(value, list):  # typed: unset keys are null
            value = [sweep_metric(m) or {} for m in value]
        if value is not None:
            config[key] = value
    if config.get("method") == "pbt":  # W&B's view: a random search of the starting values
        settings = {k: v for k, v in (sweeper.get("pbt") or {}).items() if v is not None}
        config["method"], config[pbt_policy.KEY] = "random", settings
        config.setdefault("run_cap", pbt_policy.settings_of(config)["population"])
    scheduler = config.get("scheduler")
    if parameters or not (isinstance(scheduler, dict) and scheduler.get("search_space")):
        config["parameters"] = parameters  # a define-by-run search space needs none
    config["command"] = trial_command(
        fixed, config_args, sweeper.get("gpus_per_trial") or RunnerConf.gpus_per_trial
    )
    return config


def run_count(config: dict[str, Any]) -> int | str:
    """How many runs the sweep makes: the grid size (capped by run_cap), run_cap, or "unbounded"."""
    cap = config.get("run_cap")
    if config.get("method") == "grid":
        size = 1
        for spec in flatten_parameters(config.get("parameters", {})).values():
            size *= grid_points(spec)
        return min(size, cap) if cap else size
    return cap if cap else "unbounded"
