"""The engine the agent calls: W&B's `metric.target` and `run_cap` end a sweep, suggestions are
plain Python values, and hyperband stops only running runs that were not asked already."""

from __future__ import annotations

import pytest

from trainer.sweep.search import classic
from trainer.sweep.store.database import RunRecord


def _run(i: int, state: str, value: float | None, **params) -> RunRecord:
    history = [] if value is None else [{"val/acc": value / 2}, {"val/acc": value}]
    return RunRecord(id=f"r{i}", seq=i, state=state, params=params or {"x": 0.5}, history=history)


def _random(**metric) -> dict:
    return {
        "method": "random",
        "metric": {"name": "val/acc", **metric},
        "parameters": {"x": {"min": 0.0, "max": 1.0}},
    }


@pytest.mark.parametrize(
    ("metric", "values", "ended"),
    [
        ({"goal": "maximize", "target": 0.9}, [0.5, 0.95], True),
        ({"goal": "maximize", "target": 0.9}, [0.5, 0.85], False),
        ({"goal": "minimize", "target": 0.2}, [0.5, 0.1], True),
        ({"goal": "minimize", "target": 0.2}, [0.5, 0.3], False),
        ({"goal": "maximize"}, [0.5, 0.99], False),
    ],
)
def test_metric_target_ends_the_sweep(metric, values, ended):
    runs = [_run(i, "finished", v) for i, v in enumerate(values)]
    assert classic.target_reached(_random(**metric), runs) is ended
    assert (classic.next_params(_random(**metric), runs) is None) is ended


def test_run_cap_ends_the_sweep():
    runs = [_run(i, "finished", 0.1) for i in range(3)]
    assert classic.next_params({**_random(goal="maximize"), "run_cap": 3}, runs) is None
    assert classic.next_params({**_random(goal="maximize"), "run_cap": 4}, runs) is not None


def test_suggestions_are_plain_python():
    config = {
        "method": "bayes",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {
            "x": {"min": 0.0, "max": 1.0},
            "n": {"min": 1, "max": 9},
            "q": {"distribution": "q_log_uniform_values", "min": 1, "max": 64, "q": 1},
            "m": {"values": ["a", "b"]},
        },
    }
    runs = [
        _run(0, "finished", 0.3, x=0.2, n=3, q=4, m="a"),
        _run(1, "failed", None, x=0.7, n=5, q=16, m="b"),
        _run(2, "running", 0.1, x=0.9, n=1, q=2, m="a"),
    ]
    params, info = classic.next_params(config, runs)
    assert {type(v) for v in params.values()} <= {float, int, str}
    assert type(params["n"]) is int and type(params["m"]) is str
    assert isinstance(info["expected_improvement"], float)


def test_hyperband_stops_only_running_runs_not_yet_asked():
    config = {
        **_random(goal="maximize"),
        "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 2},
    }
    runs = [_run(i, "finished", v) for i, v in enumerate([0.9, 0.8, 0.7])]
    runs += [_run(3, "running", 0.1), _run(4, "running", 0.05), _run(5, "running", 0.95)]
    runs[4].stop_requested = True  # asked already: not asked again
    assert classic.runs_to_stop(config, runs) == ["r3"]
