"""The objectives of a sweep (`metric`, or multi-objective `metrics`) and the Pareto front of
its runs: those no other run matches or beats on every objective while beating on one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def objectives(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sweep's objectives ({name, goal}), in order: `metrics`, else `metric`, else none."""
    listed = config.get("metrics")
    if isinstance(listed, list):
        return [dict(m) for m in listed if isinstance(m, dict)]
    metric = config.get("metric")
    return [dict(metric)] if isinstance(metric, dict) and metric.get("name") else []


def _maximize(objective: Mapping[str, Any]) -> bool:
    return objective.get("goal", "minimize") == "maximize"


def usable(values: Sequence[Any]) -> bool:
    """Every objective value is a finite number."""
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def dominates(a: Sequence[float], b: Sequence[float], goals: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `a` is at least as good as `b` on every objective and better on one."""
    signed = [(x, y) if _maximize(g) else (-x, -y) for x, y, g in zip(a, b, goals, strict=True)]
    return all(x >= y for x, y in signed) and any(x > y for x, y in signed)


def front(points: Mapping[str, Sequence[float]], goals: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of the Pareto-optimal points (every objective value usable), in input order."""
    ok = {key: values for key, values in points.items() if usable(values)}
    return [
        key
        for key, values in ok.items()
        if not any(dominates(other, values, goals) for k, other in ok.items() if k != key)
    ]
