"""hydra.sweeper.prewarm=true: before a sweep's trials start, compile each distinct workload of
the sweep (architecture, input shape, compile settings) once, with the trial's own command
plus compile.warm_only=true, into the machine's cache and the sweep's bundle. The workloads are
every combination of the listed values (grid: all of them; random/bayes: every choice of
`values`); a parameter drawn from a distribution that changes the workload is named instead."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.cache.env import BUNDLE_ENV, WANDB
from trainer.cache.workload import label, workload, workload_id
from trainer.config.schema import ConfigError
from trainer.outputs.summary import RunSummary
from trainer.preflight import validate
from trainer.sweep.definition.command import expand_trial_command
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.directory import SweepLayout

FULL_PRODUCT = 256  # up to this many combinations, every one is composed; beyond, relevant keys


@dataclass
class Target:
    """One distinct workload and the parameter values of a trial that has it."""

    params: dict[str, Any]
    workload: dict[str, Any]

    @property
    def id(self) -> str:
        return workload_id(self.workload)


@dataclass
class Plan:
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what prewarm cannot cover, and why


def _listed(sweep_config: Mapping[str, Any]) -> tuple[dict[str, list], dict[str, dict]]:
    listed, drawn = {}, {}
    for key, spec in (sweep_config.get("parameters") or {}).items():
        if isinstance(spec, dict) and "values" in spec:
            listed[key] = list(spec["values"])
        elif isinstance(spec, dict) and "value" in spec:
            listed[key] = [spec["value"]]
        elif isinstance(spec, dict):
            drawn[key] = spec
    return listed, drawn


def plan(sweep_config: Mapping[str, Any], compose: Callable[[dict], Any]) -> Plan:
    """The distinct workloads of the sweep; `compose(values)` is a trial's composed config
    for these parameter values (others at their first or default value)."""
    listed, drawn = _listed(sweep_config)
    result, seen = Plan(), set()

    def workload_of(values: dict) -> dict | None:
        try:
            return workload(validate(compose(values)))
        except ConfigError as err:
            result.notes.append(f"{values}: not prewarmed, this trial's config fails: {err}")
            return None

    base = {k: v[0] for k, v in listed.items()}
    keys = list(listed)
    if math.prod(len(v) for v in listed.values()) > FULL_PRODUCT:  # keys that change it alone
        first = workload_of(base)
        keys = [k for k in keys if any(workload_of({**base, k: v}) != first for v in listed[k])]
    for combo in itertools.product(*(listed[k] for k in keys)):
        values = {**base, **dict(zip(keys, combo, strict=True))}
        described = workload_of(values)
        if described is not None and workload_id(described) not in seen:
            seen.add(workload_id(described))
            result.targets.append(Target(values, described))
    for key, spec in drawn.items():
        ends = [spec[b] for b in ("min", "max") if isinstance(spec.get(b), int | float)]
        if len(ends) == 2 and len({str(workload_of({**base, key: e})) for e in ends}) > 1:
            result.notes.append(
                f"{key} is drawn from {spec.get('distribution', 'a distribution')}: each value "
                "the search draws compiles once, cold, in the trial that draws it"
            )
    return result


def before_agents(
    sweep_config: dict[str, Any], options: SweepOptions, compose: Callable[[dict], Any]
) -> Callable[[SweepLayout], None]:
    """The sweeper's hook: plan now (a config problem shows before the sweep is created), say
    what prewarm cannot cover, and compile the plan when the backend calls it with the sweep's
    layout. With backend=wandb the bundle is the sweep's project's artifacts, logged online."""
    found = plan(sweep_config, compose)
    for note in found.notes:
        print(f"prewarm: {note}", flush=True)
    env: dict[str, str] = {}
    if options.backend == "wandb":
        env = {BUNDLE_ENV: WANDB, "WANDB_MODE": "online"}
        env["WANDB_PROJECT"] = options.project
        if options.entity:
            env["WANDB_ENTITY"] = options.entity
    return lambda layout: run(found.targets, sweep_config, layout, env)


def run(
    targets: list[Target], sweep_config: Mapping[str, Any], layout: SweepLayout, env: dict
) -> None:
    """Compile each target in a trial process of its own (one at a time), into the cache and
    the bundle `env` names (default: the sweep's folder); say what each cost."""
    env = {BUNDLE_ENV: str(layout.compile_cache), **os.environ, **env}
    for i, target in enumerate(targets, 1):
        files, log_path = layout.prewarm(target.id), layout.prewarm_log(target.id)
        files.root.mkdir(parents=True, exist_ok=True)
        argv = [
            *expand_trial_command(sweep_config, target.params, files.root),
            "compile.warm_only=true",
        ]
        print(f"prewarm {i}/{len(targets)}: {label(target.workload)} ...", flush=True)
        start = time.perf_counter()
        with open(log_path, "w") as log:
            log.write(" ".join(argv) + "\n")
            log.flush()
            code = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        doc = RunSummary.read(files.summary) if code == 0 else None
        if doc is None:
            print(f"prewarm {i}/{len(targets)}: failed (exit code {code}), log {log_path}")
            continue
        comp = doc["compile"]
        misses = comp["fxgraph_cache_miss"] + comp["aot_autograd_cache_miss"]
        print(
            f"prewarm {i}/{len(targets)}: {'compiled' if misses else 'already warm'} in "
            f"{time.perf_counter() - start:.1f} s ({misses} graph(s) compiled, "
            f"{(comp.get('cache') or {}).get('pushed', 0)} file(s) added to the bundle)",
            flush=True,
        )
