"""`extend`'s overrides applied to a stored sweep definition (trainer.sweep.definition.revision):
what grows, what is refused (one paragraph saying what to do instead), and a grid that adds only
its new points."""

from __future__ import annotations

import pytest

from trainer.sweep.definition.revision import ExtendError, revise
from trainer.sweep.search import classic, space
from trainer.sweep.store.records import RunRecord

COMMAND = [
    "${env}",
    "${interpreter}",
    "-m",
    "trainer",
    "${args_no_hyphens}",
    "trainer.max_epochs=2",
]
LR = {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.1}
BAYES = {
    "method": "bayes",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": LR},
    "run_cap": 4,
    "command": COMMAND,
}
BEST = {"id": "best1", "params": {"optimizer.lr": 0.05}}


@pytest.mark.parametrize(
    "override, key, after",
    [
        ("hydra.sweeper.run_cap=80", "run_cap", 80),
        (
            "optimizer.lr=tag(log, interval(0.0001, 1.0))",
            "parameters.optimizer.lr",
            {"distribution": "log_uniform_values", "min": 0.0001, "max": 1.0},
        ),
        (
            "hydra.sweeper.params.optimizer.lr=tag(log, interval(0.0001, 1.0))",
            "parameters.optimizer.lr",
            {"distribution": "log_uniform_values", "min": 0.0001, "max": 1.0},
        ),
        ("data.batch_size=32,64", "parameters.data.batch_size", {"values": [32, 64]}),
    ],
)
def test_what_extend_grows(override, key, after):
    revision = revise(BAYES, [override], "s1", best=BEST, defaults={"data.batch_size": 64})
    assert revision.changes[key][1] == after
    assert BAYES["parameters"] == {"optimizer.lr": LR}  # the stored definition is untouched


def test_a_parameter_added_takes_the_fixed_value_the_runs_had():
    revision = revise(BAYES, ["trainer.max_epochs=1,2,4"], "s1", best=BEST)
    assert revision.config[space.ADDED_KEY] == {"trainer.max_epochs": 2}
    assert "trainer.max_epochs=2" not in revision.config["command"]  # the parameter sets it now
    assert space.inside(revision.config, BEST["params"])  # the runs before stay in the search


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["hydra.sweeper.metric.name=val/loss"], "the metric would change"),
        (["hydra.sweeper.method=random"], "hydra.sweeper.warm_start=s1"),
        (["optimizer.lr=interval(0.06, 0.1)"], "leaves out its best run best1"),
        (["compile=default"], "sets a fixed value that every trial would get"),
        (["~optimizer.lr"], "would drop a parameter"),
        (["model.width=32,64"], "--default model.width=VALUE"),
        (["hydra.sweeper.run_cap=4"], "change nothing"),
        (["hydra.sweeper.storage=x"], "not one of them"),
        (["hydra.launcher.timeout_min=5"], "Hydra's own settings"),
        (["optimizer.lr=("], "write overrides as the sweep command takes them"),
    ],
)
def test_refusals_say_what_to_do_instead(overrides, said):
    with pytest.raises(ExtendError) as refused:
        revise(BAYES, overrides, "s1", best=BEST)
    message = str(refused.value)
    assert said in message and message.endswith("Nothing was changed.") and "\n" not in message
    assert refused.value.exit_code == 2


def test_a_grid_gains_only_its_new_points():
    grid = {**BAYES, "method": "grid", "parameters": {"optimizer.lr": {"values": [0.1, 0.05]}}}
    grid.pop("run_cap")
    done = [
        RunRecord(id=f"r{i}", seq=i, state="finished", params={"optimizer.lr": lr})
        for i, lr in enumerate((0.1, 0.05))
    ]
    assert classic.next_params(grid, done) is None  # finished
    revision = revise(grid, ["optimizer.lr=0.1,0.05,0.02"], "s1")
    params, _ = classic.next_params(revision.config, done)
    assert params == {"optimizer.lr": 0.02}
    third = RunRecord(id="r3", seq=3, state="finished", params=params)
    assert classic.next_params(revision.config, [*done, third]) is None


def test_a_grid_refuses_a_range_it_cannot_enumerate():
    grid = {**BAYES, "method": "grid", "parameters": {"optimizer.lr": {"values": [0.1]}}}
    with pytest.raises(ExtendError, match="a grid sweep takes values"):
        revise(grid, ["optimizer.lr=interval(0.01, 0.2)"], "s1")


def test_bayes_is_told_only_the_runs_inside_the_new_space():
    runs = [
        RunRecord(id="in", seq=1, state="finished", params={"optimizer.lr": 0.05},
                  history=[{"val/acc": 0.8}]),
        RunRecord(id="out", seq=2, state="finished", params={"optimizer.lr": 0.002},
                  history=[{"val/acc": 0.5}]),
    ]  # fmt: skip
    narrowed = revise(BAYES, ["optimizer.lr=tag(log, interval(0.01, 0.5))"], "s1", best=BEST)
    _, info = classic.next_params(narrowed.config, runs)
    assert info["results_known"] == 1  # "out" stays in the sweep, out of the model
    _, info = classic.next_params(BAYES, runs)
    assert info["results_known"] == 2
