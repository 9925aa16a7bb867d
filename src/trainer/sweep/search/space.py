"""Whether a run's parameters lie inside a sweep's search space, and the runs an engine is told:
a sweep extended in place (`python -m trainer.sweep extend`) tells its engine only its runs
inside the new space, those run before a parameter was added completed with that parameter's
value then; a warm-started sweep adds the earlier sweeps' runs inside its space
(hydra.sweeper.warm_start). It lives with the engines, which filter by it; `extend` and the
warm start (trainer.sweep.definition) decide with it too."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from trainer.sweep.search.distributions import distribution
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.records import RunRecord

# The sweep configuration's local-only key of the parameters `extend` added: name -> the value
# every run before had (its engine completes those runs with it).
ADDED_KEY = "added_defaults"
REVISION_KEY = "revision"  # the store key: the sweep definition's revision, 1 until extended
REVISIONS_KEY = "revisions"  # the store key: every revision (changes, who, when, its config)
WARM_KEY = "warm_start"  # the store key: {sweeps, prior_runs: [{id, params, history}]}

_UNBOUNDED = ("normal", "q_normal")
_POSITIVE = ("log_normal", "q_log_normal")
_UNIT = ("beta", "q_beta")
_EXPONENTS = ("log_uniform", "q_log_uniform")  # min/max are exponents of e
_INVERSE_EXPONENTS = ("inv_log_uniform",)  # 1/x = e^u, u in [min, max]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _within(value: float, low: float, high: float, slack: float = 0.0) -> bool:
    tolerance = 1e-9 * max(abs(low), abs(high), 1e-300) + slack
    return low - tolerance <= value <= high + tolerance


def flatten_parameters(parameters: dict[str, Any], prefix: str = "") -> dict[str, dict]:
    """Nested `parameters:` blocks become flat dotted keys ({"a": {"parameters": {"b": s}}} -> {"a.b": s})."""
    flat: dict[str, dict] = {}
    for key, spec in (parameters or {}).items():
        name = f"{prefix}{key}"
        if isinstance(spec, dict) and "parameters" in spec:
            flat.update(flatten_parameters(spec["parameters"], f"{name}."))
        else:
            flat[name] = dict(spec) if isinstance(spec, dict) else spec
    return flat


def _flat_params(
    params: dict[str, Any], parameters: dict[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """A run's values of nested parameter blocks ({"a": {"x": 1}}) as flat dotted keys."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        spec = (parameters or {}).get(key)
        if isinstance(spec, dict) and "parameters" in spec and isinstance(value, dict):
            flat.update(_flat_params(value, spec["parameters"], f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def bounds(spec: dict[str, Any]) -> tuple[float, float] | None:
    """The values a numeric distribution draws from, as (low, high); None when it is not one
    defined by min/max (categorical, constant, normal, ...)."""
    dist = distribution(spec)
    if "min" not in spec or "max" not in spec:
        return None
    low, high = float(spec["min"]), float(spec["max"])
    if dist in _EXPONENTS:
        return math.exp(low), math.exp(high)
    if dist in _INVERSE_EXPONENTS:
        return math.exp(-high), math.exp(-low)
    if dist in (*_UNBOUNDED, *_POSITIVE, *_UNIT):
        return None
    return low, high


def contains(spec: Any, value: Any) -> bool:
    """Whether `value` is one that the parameter `spec` (W&B's spelling) can give a run."""
    if not isinstance(spec, dict):
        return spec == value
    dist = distribution(spec)
    if dist == "constant":
        return spec.get("value") == value
    if dist.startswith("categorical"):
        return value in (spec.get("values") or [])
    if not _number(value):
        return False
    if dist in _UNBOUNDED:
        return True
    if dist in _POSITIVE:
        return value > 0
    if dist in _UNIT:
        return 0.0 <= value <= 1.0
    span = bounds(spec)
    if span is None:
        return True  # a distribution without bounds: every number
    if dist == "int_uniform" and float(value) != int(value):
        return False
    return _within(float(value), *span, slack=float(spec.get("q", 0.0)) / 2)


def completed(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters with each parameter added since it ran set to the value it had."""
    added = config.get(ADDED_KEY) or {}
    return {**{k: v for k, v in added.items() if k not in params}, **params}


def outside(
    config: dict[str, Any], params: dict[str, Any], fixed: dict[str, Any] | None = None
) -> list[str]:
    """Why `params` (completed) lie outside the sweep's space, one `key=value` reason per
    parameter; [] when inside. With `fixed` (the new sweep's fixed overrides: a warm start), a
    key the space does not search is inside only when `fixed` sets it to the same value;
    without, such keys (a repeat's trainer.seed) are not judged. A define-by-run space
    (scheduler.search_space, no `parameters`) cannot be read: everything is inside."""
    space = flatten_parameters(config.get("parameters") or {})
    if not space:
        return []
    params = _flat_params(completed(config, params), config.get("parameters") or {})
    reasons = []
    for key, spec in space.items():
        if key not in params:
            reasons.append(f"{key} (not set: the run predates it)")
        elif not contains(spec, params[key]):
            reasons.append(f"{key}={params[key]!r} (not in {describe(spec)})")
    for key in sorted(params.keys() - space.keys()) if fixed is not None else ():
        if key not in fixed or fixed[key] != params[key]:
            reasons.append(f"{key}={params[key]!r} (not a parameter of this sweep)")
    return reasons


def inside(config: dict[str, Any], params: dict[str, Any]) -> bool:
    return not outside(config, params)


def describe(spec: Any) -> str:
    """A parameter's space in a few words: `[0.0001, 0.1] (log_uniform_values)`, `[a, b]`."""
    if not isinstance(spec, dict):
        return repr(spec)
    dist = distribution(spec)
    if dist == "constant":
        return f"the value {spec.get('value')!r}"
    if dist.startswith("categorical"):
        return f"the values {list(spec.get('values') or [])}"
    span = bounds(spec)
    if span is None:
        return dist
    return f"[{span[0]:g}, {span[1]:g}] ({dist})"


def told(config: dict[str, Any], runs: list[RunRecord]) -> list[RunRecord]:
    """The runs an engine is told: those inside the space, completed with the parameters added
    since they ran (runs outside it stay in the sweep, out of the engine's model)."""
    if not config.get("parameters"):
        return list(runs)
    kept = []
    for run in runs:
        params = completed(config, run.params)
        if not outside(config, params):
            kept.append(run if params == run.params else replace(run, params=params))
    return kept


def revision(store: SweepStore, db: Any = None) -> int:
    """The sweep definition's revision (1 until `extend` changed it)."""
    return int(store.get(REVISION_KEY, 1, db))


def prior_runs(store: SweepStore, config: dict[str, Any]) -> list[RunRecord]:
    """hydra.sweeper.warm_start: the earlier sweeps' finished runs inside this sweep's space,
    as records an engine is told (ids `<sweep>/<run>`, never handed out)."""
    warm = store.get(WARM_KEY) or {}
    runs = [
        RunRecord(id=p["id"], seq=0, state="finished", params=p["params"], history=p["history"])
        for p in warm.get("prior_runs") or ()
    ]
    return told(config, runs)
