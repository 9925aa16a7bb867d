"""hydra.sweeper.repeats: every configuration a sweep tries runs R times, with the seeds
`trainer.seed + i` (i = 0..R-1); its engine hears one result per configuration, the mean over its
seeds once all have ended, and the report ranks configurations by mean ± std."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from trainer.sweep.search.classic import metric_value
from trainer.sweep.store.database import TERMINAL, RunRecord, SweepStore

SEED = "trainer.seed"  # the key whose value differs between the repeats of a configuration
STORE_KEY = "repeats"  # the sweep's {"count": R, "seeds": [...]} in its store

Propose = Callable[[list[RunRecord]], tuple[dict, dict | None] | None]


@dataclass(frozen=True)
class Repeats:
    """How often each configuration runs, and with which seeds (the same for every one)."""

    count: int
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, count: int, base_seed: int) -> Repeats:
        return cls(count, tuple(base_seed + i for i in range(count)))

    @classmethod
    def of_store(cls, store: SweepStore) -> Repeats | None:
        """The sweep's repeats as its store keeps them (None: every configuration runs once),
        so that an agent joining later repeats as the first ones do."""
        found = store.get(STORE_KEY)
        if not found or int(found["count"]) <= 1:
            return None
        return cls(int(found["count"]), tuple(int(s) for s in found["seeds"]))

    def record(self, store: SweepStore) -> None:
        store.set(STORE_KEY, {"count": self.count, "seeds": list(self.seeds)})


def problems(count: Any, config: dict[str, Any]) -> list[str]:
    """What is wrong with hydra.sweeper.repeats=`count` for this W&B configuration."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return [
            f"hydra.sweeper.repeats={count!r} must be an integer >= 1: how many times each "
            "configuration runs, with the seeds trainer.seed, trainer.seed+1, ... (1: once, "
            "the default); e.g. hydra.sweeper.repeats=3"
        ]
    if count == 1:
        return []
    found = []
    if SEED in (config.get("parameters") or {}):
        found.append(
            f"hydra.sweeper.repeats={count} sets {SEED} of each repeat itself (trainer.seed, "
            "trainer.seed+1, ...), but trainer.seed is also a swept parameter: remove it from "
            "the parameters (or set it once, e.g. trainer.seed=7, as the first seed), or drop "
            "hydra.sweeper.repeats"
        )
    if isinstance(config.get("metrics"), list):
        found.append(
            f"hydra.sweeper.repeats={count} ranks configurations by the mean of one metric; "
            "with several objectives (metrics:) use metric: {name: ..., goal: ...} instead, "
            "or drop hydra.sweeper.repeats"
        )
    if config.get("early_terminate"):
        found.append(
            f"hydra.sweeper.repeats={count} cannot go with early_terminate (hyperband): "
            "hyperband stops single runs at its rungs, so a configuration would be judged on "
            "some of its seeds and its mean on fewer than the others'; remove early_terminate "
            "or hydra.sweeper.repeats"
        )
    return found


def runs_line(configurations: int | str, repeats: Repeats | None) -> str:
    """The dry run's `# runs:` line: `8 configurations x 3 seeds = 24 runs`."""
    if repeats is None:
        return str(configurations)
    total = configurations * repeats.count if isinstance(configurations, int) else "unbounded"
    return f"{configurations} configurations x {repeats.count} seeds = {total} runs"


def for_server(config: dict[str, Any], repeats: Repeats) -> dict[str, Any]:
    """The W&B configuration for the W&B server: trainer.seed swept over the seeds (with grid,
    every point runs with each seed; random and bayes draw the seed), run_cap in runs."""
    parameters = {**(config.get("parameters") or {}), SEED: {"values": list(repeats.seeds)}}
    out = {**config, "parameters": parameters}
    if config.get("run_cap"):
        out["run_cap"] = config["run_cap"] * repeats.count
    return out


def server_note(config: dict[str, Any], repeats: Repeats) -> str:
    exact = config.get("method") == "grid"
    how = (
        "grid runs every point with each seed"
        if exact
        else f"{config.get('method')} draws the seed like any parameter, so a configuration "
        "is not guaranteed all its seeds, and the W&B server ranks single runs, not means"
    )
    return (
        f"backend=wandb: hydra.sweeper.repeats={repeats.count} becomes the swept parameter "
        f"{SEED}: {list(repeats.seeds)} (run_cap, if set, times {repeats.count}); {how}"
    )


# The runs of a sweep, grouped by configuration ------------------------------------------------
@dataclass
class Configuration:
    """One configuration and the runs of its repeats so far (claimed order)."""

    key: Any
    params: dict[str, Any]  # without trainer.seed
    runs: list[RunRecord] = field(default_factory=list)

    def seeds(self) -> list[Any]:
        return [r.params.get(SEED) for r in self.runs]

    def ended(self, repeats: Repeats) -> bool:
        return len(self.runs) >= repeats.count and all(r.state in TERMINAL for r in self.runs)


def _key(run: RunRecord, by_id: dict[str, RunRecord]) -> Any:
    """A run's configuration: the number its first repeat was given, followed back through
    reruns of a crashed run; else its parameters without the seed."""
    seen = set()
    while run.id not in seen:
        seen.add(run.id)
        number = (run.search_info or {}).get("configuration")
        if number is not None:
            return ("n", number)
        if run.rerun_of is None or run.rerun_of not in by_id:
            break
        run = by_id[run.rerun_of]
    return ("p", repr(sorted((k, repr(v)) for k, v in run.params.items() if k != SEED)))


def configurations(runs: list[RunRecord]) -> list[Configuration]:
    """The sweep's configurations in the order they were first claimed (superseded runs left
    out: their rerun stands for them)."""
    by_id = {r.id: r for r in runs}
    groups: dict[Any, Configuration] = {}
    for run in sorted(runs, key=lambda r: r.seq):
        if run.superseded:
            continue
        key = _key(run, by_id)
        if key not in groups:
            base = {k: v for k, v in run.params.items() if k != SEED}
            groups[key] = Configuration(key, base)
        groups[key].runs.append(run)
    return list(groups.values())


def metric_of(run: RunRecord, name: str) -> float | None:
    """The run's last logged value of `name` (W&B's summary value), if a finite number."""
    value = metric_value(run, {"name": name})
    ok = isinstance(value, int | float) and math.isfinite(value)
    return float(value) if ok else None


def spread(values: list[float]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation) of the values; std 0.0 for one value, None for none."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def collapsed(
    groups: list[Configuration], repeats: Repeats, metric: dict | None
) -> list[RunRecord]:
    """One run per configuration, as an engine hears of it: running until all its repeats
    ended, then finished with the mean of the metric as its one epoch (failed when no repeat
    has a value); its id is the first repeat's, its parameters are without the seed."""
    out = []
    for group in groups:
        first = group.runs[0]
        if not group.ended(repeats):
            out.append(replace(first, params=group.params, state="running", history=[]))
            continue
        name = (metric or {}).get("name")
        mean, _ = spread([v for r in group.runs if (v := metric_of(r, name)) is not None])
        if name is None:
            out.append(replace(first, params=group.params, state="finished", history=[]))
        elif mean is None:
            out.append(replace(first, params=group.params, state="failed", history=[]))
        else:
            row = {name: mean}
            out.append(replace(first, params=group.params, state="finished", history=[row]))
    return out


def next_repeat(groups: list[Configuration], repeats: Repeats) -> tuple[dict, dict | None] | None:
    """The next repeat of a configuration that has not had all its seeds yet (oldest first)."""
    for number, group in enumerate(groups):
        if len(group.runs) < repeats.count:
            i = len(group.runs)
            info = {**(group.runs[0].search_info or {}), "repeat": i}
            info.setdefault("configuration", number)
            info.pop("suggestion", None)  # the optimizer's suggestion is the first repeat's
            return {**group.params, SEED: repeats.seeds[i]}, info
    return None


def proposer(
    repeats: Repeats | None, metric: dict | None, engine: Propose, *, told_collapsed: bool = True
) -> Propose:
    """`engine`'s proposals, each run `repeats.count` times: a configuration's missing repeats
    first, then a new configuration from `engine`, told one run per configuration
    (`collapsed`), or the store's runs as they are when `told_collapsed` is False (a queue of
    suggestions that only needs to be popped)."""
    if repeats is None:
        return engine

    def propose(runs: list[RunRecord]) -> tuple[dict, dict | None] | None:
        groups = configurations(runs)
        pending = next_repeat(groups, repeats)
        if pending is not None:
            return pending
        proposal = engine(collapsed(groups, repeats, metric) if told_collapsed else runs)
        if proposal is None:
            return None
        params, info = proposal
        info = {**(info or {}), "configuration": len(groups), "repeat": 0}
        return {**params, SEED: repeats.seeds[0]}, info

    return propose


def summary(groups: list[Configuration], metric: dict | None) -> list[dict[str, Any]]:
    """Per configuration: parameters, mean, std and n of the metric over its ended repeats,
    their run ids, seeds and states (unranked)."""
    name = (metric or {}).get("name")
    out = []
    for group in groups:
        values = [v for r in group.runs if name and (v := metric_of(r, name)) is not None]
        mean, std = spread(values)
        out.append(
            {
                "id": group.runs[0].id,
                "params": group.params,
                "metric": mean,
                "std": std,
                "n": len(values),
                "runs": [r.id for r in group.runs],
                "seeds": group.seeds(),
                "states": [r.state for r in group.runs],
            }
        )
    return out
