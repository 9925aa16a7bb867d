"""Population-based training's policy: each member's starting values, and at every interval the
answer to a member's report: in the bottom quantile of the members that reached that epoch it
copies a leader from the top quantile and explores the leader's values (perturbed, or resampled),
else it keeps its own (asynchronous PBT, as Ray Tune's default). A member's agent answers its
reports (`answer_reports`, at every poll) through the trial's files (`trainer.trial.pbt_files`)."""

from __future__ import annotations

import math
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra_plugins.wandb_sweeper.config import PbtConf
from trainer.sweep.search.distributions import distribution
from trainer.trial import pbt_files
from trainer.trial.pbt_files import Report, Settings, Step

FOLDER_KEY = "pbt_folder"  # the store key of the one folder every member of the sweep reports to
KEY = "pbt"  # a PBT sweep configuration's block of settings (beside W&B's keys)
# The keys a member changes in place, without rebuilding or recompiling anything.
KEYS = (
    "optimizer.lr",
    "optimizer.weight_decay",
    "optimizer.momentum",
    "trainer.label_smoothing",
    "trainer.grad_clip",
)
# W&B's distributions a PBT parameter may use: sampled, perturbed (continuous) or resampled.
CONTINUOUS = ("uniform", "log_uniform_values", "int_uniform")
DEFAULTS = asdict(PbtConf())  # hydra.sweeper.pbt's settings, as the sweeper's config declares them
FACTORS = (0.8, 1.2)  # explore: each continuous value times one of these, kept in its bounds


def is_pbt(config: dict[str, Any]) -> bool:
    """Whether sweep configuration `config` runs population-based training."""
    return isinstance(config.get(KEY), dict)


def settings_of(config: dict[str, Any]) -> dict[str, Any]:
    """The `pbt` block of a PBT sweep configuration, defaults filled in."""
    return {**DEFAULTS, **(config.get(KEY) or {})}


def swept(parameters: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The parameters that differ between members (a single `value` is every member's)."""
    return {k: s for k, s in parameters.items() if "value" not in s}


def member_settings(config: dict[str, Any], folder: Path) -> Settings | None:
    """What makes a trial of sweep `config` a PBT member (None for another method); `folder` is
    the sweep's pbt/ folder. Every member gets the same (its id is its run's)."""
    if not is_pbt(config):
        return None
    metric = config.get("metric") or {}
    return Settings(
        folder=str(folder),
        parameters=dict(config.get("parameters") or {}),
        metric=metric["name"],
        maximize=metric.get("goal") == "maximize",
        **settings_of(config),
    )


# ---------------------------------------------------------------------------------------------
# Sampling and exploring


def sample(spec: dict[str, Any], rng: random.Random) -> Any:
    """One value of a W&B parameter spec PBT accepts (values, uniform, log_uniform_values,
    int_uniform; a single value)."""
    kind = distribution(spec)
    if kind == "constant":
        return spec["value"]
    if kind.startswith("categorical"):
        return rng.choice(list(spec["values"]))
    low, high = spec["min"], spec["max"]
    if kind == "int_uniform":
        return rng.randint(int(low), int(high))
    if kind == "log_uniform_values":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def initial(settings_seed: int, index: int, parameters: dict[str, dict[str, Any]]) -> dict:
    """Member `index`'s starting values: the same sweep seed gives the same population."""
    rng = random.Random(f"{settings_seed}:start:{index}")
    return {key: sample(spec, rng) for key, spec in sorted(parameters.items())}


def perturb(spec: dict[str, Any], value: Any, rng: random.Random, resample_p: float) -> Any:
    """Explore one value: resampled with probability `resample_p`, else a continuous value
    times 0.8 or 1.2 within its bounds, a listed value moved to a neighbour in the list."""
    if "value" in spec:
        return spec["value"]
    if rng.random() < resample_p:
        return sample(spec, rng)
    if "values" in spec:
        values = list(spec["values"])
        if value not in values:
            return rng.choice(values)
        i = values.index(value) + rng.choice((-1, 1))
        return values[min(max(i, 0), len(values) - 1)]
    moved = min(max(value * rng.choice(FACTORS), spec["min"]), spec["max"])
    return round(moved) if distribution(spec) == "int_uniform" else moved


# ---------------------------------------------------------------------------------------------
# Ranking and deciding


def ranked(settings: Settings, reports: list[Report]) -> list[Report]:
    """Best first (ties: by member id, so every member ranks alike)."""
    sign = -1.0 if settings.maximize else 1.0
    return sorted(reports, key=lambda r: (sign * r.score, r.member))


def quantile_size(settings: Settings, n: int) -> int:
    """How many members make the top (and the bottom) quantile of `n` (Ray Tune's rule)."""
    size = math.ceil(n * settings.quantile)
    return min(size, n // 2)


def decide(settings: Settings, own: Report) -> Step:
    """The member's step at `own.epoch`: in the bottom quantile of the members at this epoch,
    it copies a leader from the top quantile and explores the leader's values; else it keeps
    its own checkpoint and values."""
    order = ranked(settings, pbt_files.reports_at(settings, own.epoch))
    size = quantile_size(settings, len(order))
    names = [r.member for r in order]
    keep = Step(own.epoch, dict(own.params), None, own.score)
    if size == 0 or own.member not in names or names.index(own.member) < len(order) - size:
        return keep
    rng = random.Random(f"{settings.seed}:{own.member}:{own.epoch}")
    leader = rng.choice(order[:size])
    params = {
        key: perturb(settings.parameters[key], value, rng, settings.resample_probability)
        if key in settings.parameters
        else value
        for key, value in leader.params.items()
    }
    return Step(own.epoch, params, leader.member, own.score, leader.score)


def answer_reports(settings: Settings, member: str) -> list[Step]:
    """Answer every report of `member` still waiting for its decision (the agent calls this at
    each poll of the member's trial), then drop the checkpoints nobody copies any more."""
    answered = []
    for report in pbt_files.undecided(settings, member):
        step = decide(settings, report)
        pbt_files.answer(settings, member, step)
        pbt_files.prune(settings, report.epoch)
        answered.append(step)
    return answered
