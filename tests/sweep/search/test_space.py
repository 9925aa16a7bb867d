"""Whether a run's parameters lie inside a sweep's space (trainer.sweep.search.space): each W&B
distribution's bounds, the reasons given, and the runs an engine is told after `extend`."""

from __future__ import annotations

import pytest

from trainer.sweep.search import classic, space
from trainer.sweep.store.records import RunRecord


@pytest.mark.parametrize(
    "spec, inside, outside",
    [
        ({"value": 3}, [3], [4, "3"]),
        ({"values": [0.1, 0.05]}, [0.1, 0.05], [0.02, None]),
        ({"values": ["a", "b"], "probabilities": [0.5, 0.5]}, ["a"], ["c"]),
        ({"min": 1, "max": 4}, [1, 4, 2], [0, 5, 2.5, True]),
        ({"distribution": "uniform", "min": 0.1, "max": 0.9}, [0.1, 0.5, 0.9], [0.95, "x"]),
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1}, [1e-4, 0.1], [0.2]),
        ({"distribution": "log_uniform", "min": -2.0, "max": 0.0}, [0.2, 1.0], [0.1, 2.0]),
        ({"distribution": "inv_log_uniform", "min": 0.0, "max": 2.0}, [0.2, 1.0], [0.1, 2.0]),
        ({"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.5}, [1.0, 1.2], [1.3]),
        ({"distribution": "normal", "mu": 0, "sigma": 1}, [-50.0, 3], ["a"]),
        ({"distribution": "log_normal", "mu": 0, "sigma": 1}, [0.5], [0.0, -1]),
        ({"distribution": "beta", "a": 2, "b": 2}, [0.0, 0.3], [1.2]),
    ],
)
def test_contains_each_distribution(spec, inside, outside):
    assert all(space.contains(spec, v) for v in inside)
    assert not any(space.contains(spec, v) for v in outside)


CONFIG = {
    "parameters": {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.1},
        "model.width": {"values": [32, 64]},
    },
    space.ADDED_KEY: {"model.width": 32},  # added by extend: the runs before had 32
}


def test_outside_names_each_parameter_and_completes_added_ones():
    assert space.outside(CONFIG, {"optimizer.lr": 0.01}) == []  # width: 32 then, inside
    assert space.outside(CONFIG, {"optimizer.lr": 0.5, "model.width": 16}) == [
        "optimizer.lr=0.5 (not in [0.001, 0.1] (log_uniform_values))",
        "model.width=16 (not in the values [32, 64])",
    ]
    # a repeat's seed is not judged; with a new sweep's fixed values (a warm start) it is
    assert space.inside(CONFIG, {"optimizer.lr": 0.01, "trainer.seed": 3})
    fixed = space.outside(CONFIG, {"optimizer.lr": 0.01, "trainer.seed": 3}, {"trainer.seed": 4})
    assert fixed == ["trainer.seed=3 (not a parameter of this sweep)"]
    assert space.outside({"scheduler": {"search_space": "f"}}, {"x": 1}) == []  # define-by-run


def test_told_keeps_the_runs_inside_completed():
    runs = [
        RunRecord(id="a", seq=1, state="finished", params={"optimizer.lr": 0.01}),
        RunRecord(id="b", seq=2, state="finished", params={"optimizer.lr": 0.5}),
        RunRecord(
            id="c", seq=3, state="finished", params={"optimizer.lr": 0.02, "model.width": 64}
        ),
    ]
    told = space.told(CONFIG, runs)
    assert [(r.id, r.params) for r in told] == [
        ("a", {"model.width": 32, "optimizer.lr": 0.01}),
        ("c", {"optimizer.lr": 0.02, "model.width": 64}),
    ]
    assert runs[0].params == {"optimizer.lr": 0.01}  # the store's record is left as it was


def test_nested_parameter_blocks_are_read_flat():
    config = {"parameters": {"a": {"parameters": {"x": {"values": [1, 2]}}}}}
    assert space.inside(config, {"a": {"x": 2}}) and not space.inside(config, {"a": {"x": 3}})


@pytest.mark.parametrize(
    "spec",
    [
        {"distribution": "int_uniform", "min": 1, "max": 6},
        {"distribution": "uniform", "min": -1.0, "max": 2.0},
        {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.3},
        {"distribution": "log_uniform", "min": -3.0, "max": 1.0},
        {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1},
        {"distribution": "q_log_uniform", "min": 0.0, "max": 3.0, "q": 2},
        {"distribution": "q_log_uniform_values", "min": 1.0, "max": 100.0, "q": 5},
        {"distribution": "inv_log_uniform", "min": 0.0, "max": 3.0},
        {"distribution": "inv_log_uniform_values", "min": 0.01, "max": 10.0},
        {"distribution": "log_normal", "mu": 0.0, "sigma": 2.0},
        {"distribution": "q_beta", "a": 2, "b": 3, "q": 0.1},
    ],
)
def test_every_value_the_engine_draws_lies_inside(spec):
    """The engine's own draws are never kept from it (a grid or bayes would lose its runs)."""
    config = {"method": "random", "parameters": {"p": spec}}
    runs: list[RunRecord] = []
    for i in range(200):
        params, _ = classic.next_params(config, runs)
        runs.append(RunRecord(id=f"r{i}", seq=i, state="finished", params=params))
    assert [r.params["p"] for r in runs if not space.inside(config, r.params)] == []
