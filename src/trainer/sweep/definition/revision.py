"""`python -m trainer.sweep extend SWEEP OVERRIDES`: a sweep's definition revised in place by
Hydra overrides, as the sweep command translates them (translate.spec_from_override): more runs
(hydra.sweeper.run_cap), a wider range, grid values added, a parameter added with the value the
runs before had. What would make the old runs meaningless is refused in one paragraph (exit 2,
nothing changed): another metric or method, a parameter narrowed so that the best run falls
outside, a changed fixed setting of the trials, a cancelled sweep."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException

from trainer.errors import TrainerError
from trainer.sweep.definition.translate import (
    TranslationError,
    flatten_parameters,
    spec_from_override,
)
from trainer.sweep.definition.warm_start import fixed_values
from trainer.sweep.search import space
from trainer.sweep.search.distributions import grid_points
from trainer.sweep.search.pbt_policy import is_pbt

PREFIX = "hydra.sweeper."
GROWS = ("run_cap", "name", "description")  # sweeper keys extend changes in the definition
KEPT = ("method", "metric", "metrics", "scheduler", "early_terminate")  # never under old runs
RUNS = ("agents", "count")  # how extend's own agents run (not part of the definition)


class ExtendError(TrainerError):
    """An extension refused: one paragraph, exit 2, nothing in the sweep changed."""


@dataclass
class Revision:
    """The revised definition, what changed (key -> [before, after]) and how extend's own
    agents run (agents, count)."""

    config: dict[str, Any]
    changes: dict[str, list[Any]] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)


def new_sweep(sweep_id: str) -> str:
    """The way on when extending would make the old runs meaningless."""
    return (
        f"start a new sweep with the new definition and hydra.sweeper.warm_start={sweep_id}: "
        f"its engine is told the finished runs of {sweep_id} that lie in the new space, and "
        f"{sweep_id} keeps its own leaderboard"
    )


def _parse(lines: list[str], sweep_id: str) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(list(lines))
    except OverrideParseException as err:
        raise ExtendError(
            f"extend {sweep_id}: {err.message.splitlines()[0]}; write overrides as the sweep "
            "command takes them, e.g. hydra.sweeper.run_cap=80, optimizer.lr=0.1,0.05,0.02 or "
            "'optimizer.lr=tag(log, interval(0.0001, 1.0))'. Nothing was changed."
        ) from err


def _value_text(override: Override) -> str:
    return override.input_line.split("=", 1)[1]


def _sweeper_key(
    override: Override, name: str, revision: Revision, sweep_id: str, defaults: dict[str, Any]
) -> None:
    """One hydra.sweeper.<name> override: a definition key extend grows, a run setting, a
    parameter in Hydra's sweeper spelling (params.KEY), or a refusal."""
    config = revision.config
    if name.startswith("params."):
        line = f"{name.removeprefix('params.')}={_value_text(override)}"
        _parameter(_parse([line], sweep_id)[0], revision, sweep_id, defaults)
        return
    if override.is_sweep_override():
        raise ExtendError(
            f"extend {sweep_id}: {override.input_line} sweeps a setting of the sweep itself; give "
            f"it one value, e.g. {PREFIX}run_cap=80. Nothing was changed."
        )
    value = override.value()
    top = name.split(".", 1)[0]
    if top in GROWS:
        if name == "run_cap" and not (isinstance(value, int) and value > 0):
            raise ExtendError(
                f"extend {sweep_id}: {override.input_line}: run_cap must be a positive number of "
                "runs (the sweep's total, runs so far included). Nothing was changed."
            )
        if config.get(name) != value:
            revision.changes[name] = [config.get(name), value]
            config[name] = value
        return
    if top in RUNS:
        revision.run[top] = value
        return
    if top in KEPT:
        before = copy.deepcopy(config.get(top))
        after = copy.deepcopy(before) if isinstance(before, dict) else before
        if "." in name and isinstance(after, dict):
            after[name.split(".", 1)[1]] = value
        else:
            after = value
        if after != before:
            raise ExtendError(_kept_refusal(top, before, after, sweep_id))
        return
    raise ExtendError(
        f"extend {sweep_id}: {override.input_line}: extend changes the search space and run_cap "
        f"({PREFIX}run_cap, {PREFIX}params.KEY or KEY=values), and runs with {PREFIX}agents and "
        f"{PREFIX}count; {PREFIX}{top} is not one of them. Nothing was changed."
    )


def _kept_refusal(key: str, before: Any, after: Any, sweep_id: str) -> str:
    """Why `key` cannot change under the sweep's runs, and what to do instead."""
    if key in ("metric", "metrics"):
        return (
            f"extend {sweep_id}: the {key} would change from {before} to {after}: the runs so far "
            "were ranked and searched by the old one, so one leaderboard would mix two "
            "objectives. Start a new sweep with the new metric (a warm start needs the same "
            f"metric: {sweep_id}'s runs say nothing about another). Nothing was changed."
        )
    return (
        f"extend {sweep_id}: {key} would change from {before} to {after}: the runs so far were "
        f"decided by the old one, so they would not belong to one search. Instead, "
        f"{new_sweep(sweep_id)}. Nothing was changed."
    )


def _parameter(
    override: Override, revision: Revision, sweep_id: str, defaults: dict[str, Any]
) -> None:
    """One override of a trial key: a parameter widened, narrowed or given values, or a new
    parameter with the value the runs before had."""
    config, key = revision.config, override.key_or_group
    parameters = config.setdefault("parameters", {})
    if override.is_delete():
        raise ExtendError(
            f"extend {sweep_id}: {override.input_line} would drop a parameter the runs so far "
            f"varied. Instead, {new_sweep(sweep_id)}. Nothing was changed."
        )
    try:
        spec = (
            spec_from_override(override)
            if override.is_sweep_override()
            else {"value": override.value()}
        )
    except TranslationError as err:
        raise ExtendError(f"extend {sweep_id}: {err} Nothing was changed.") from err
    if key not in parameters and not override.is_sweep_override():
        raise ExtendError(
            f"extend {sweep_id}: {override.input_line} sets a fixed value that every trial "
            "would get, but the runs so far ran without it: extend grows the search space "
            "(KEY=a,b,c, a range or interval) and run_cap. Instead, "
            f"{new_sweep(sweep_id)}. Nothing was changed."
        )
    if key not in parameters:
        _added(key, config, defaults, sweep_id)
    if parameters.get(key) != spec:
        revision.changes[f"parameters.{key}"] = [parameters.get(key), spec]
        parameters[key] = spec


def _added(key: str, config: dict[str, Any], defaults: dict[str, Any], sweep_id: str) -> None:
    """A parameter the sweep did not search: the value every run before had (--default, else
    the trials' fixed override of it, which the parameter now replaces)."""
    fixed = fixed_values(config)
    if key in defaults:
        value = defaults[key]
    elif key in fixed:
        value = fixed[key]
    else:
        raise ExtendError(
            f"extend {sweep_id}: {key} is a new parameter, and the runs so far ran with its "
            f"configured value, which extend cannot read: give it with --default {key}=VALUE "
            "(the value every run so far had), so that those runs stay in the search. "
            "Nothing was changed."
        )
    if key in fixed:  # the parameter now sets it: the fixed override leaves the command
        config["command"] = [c for c in config.get("command") or [] if not _sets(c, key)]
    config.setdefault(space.ADDED_KEY, {})[key] = value


def _sets(chunk: Any, key: str) -> bool:
    return isinstance(chunk, str) and chunk.lstrip("+~").split("=", 1)[0] == key and "=" in chunk


def _grid_problem(config: dict[str, Any], sweep_id: str) -> None:
    if config.get("method") != "grid":
        return
    for key, spec in (config.get("parameters") or {}).items():
        try:
            grid_points(spec)
        except ValueError as err:
            raise ExtendError(
                f"extend {sweep_id}: parameters.{key}: {err}; a grid sweep takes values "
                f"({key}=a,b,c or range(...)). Nothing was changed."
            ) from err


def revise(
    config: dict[str, Any],
    overrides: list[str],
    sweep_id: str,
    *,
    best: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
) -> Revision:
    """The sweep definition `config` with `overrides` applied (ExtendError, nothing changed,
    when one would make the runs so far meaningless). `best`: the sweep's best run ({id,
    params}), which must stay inside the new space; `defaults`: --default KEY=VALUE, the value
    the runs so far had of a parameter added now."""
    if is_pbt(config):
        raise ExtendError(
            f"extend {sweep_id}: a population-based training sweep's members are its search; "
            f"it does not grow in place. Instead, {new_sweep(sweep_id)}. Nothing was changed."
        )
    revision = Revision(copy.deepcopy(config))
    if isinstance(revision.config.get("parameters"), dict):
        revision.config["parameters"] = flatten_parameters(revision.config["parameters"])
    for override in _parse(overrides, sweep_id):
        key = override.key_or_group
        if key.startswith(PREFIX):
            _sweeper_key(override, key.removeprefix(PREFIX), revision, sweep_id, defaults or {})
        elif key.startswith("hydra."):
            raise ExtendError(
                f"extend {sweep_id}: {override.input_line}: Hydra's own settings are fixed when "
                "a sweep starts; extend takes hydra.sweeper.run_cap, hydra.sweeper.params.KEY "
                "and trial keys (KEY=a,b,c). Nothing was changed."
            )
        else:
            _parameter(override, revision, sweep_id, defaults or {})
    if not revision.changes:
        raise ExtendError(
            f"extend {sweep_id}: the overrides ({' '.join(overrides) or 'none'}) change nothing in "
            "its definition; give more runs (hydra.sweeper.run_cap=N), new values (KEY=a,b,c) or "
            "a wider range (KEY='interval(a, b)'). Agents join it as it is with python -m "
            f"trainer.agent {sweep_id}. Nothing was changed."
        )
    _grid_problem(revision.config, sweep_id)
    if best is not None:
        why = space.outside(revision.config, best["params"])
        if why:
            raise ExtendError(
                f"extend {sweep_id}: the new space leaves out its best run {best['id']} "
                f"({'; '.join(why)}), so the search would forget what it found. Widen instead "
                f"of narrowing, or {new_sweep(sweep_id)}. Nothing was changed."
            )
    return revision
