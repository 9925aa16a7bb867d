"""hydra.sweeper.warm_start (trainer.sweep.definition.warm_start): the earlier sweeps it names,
the runs of theirs inside the new space that the engine is told, and what it refuses (another
metric, model or data set; an unknown sweep) before anything runs."""

from __future__ import annotations

import os

import pytest

from tests.sweep.finished_sweep import finished_sweep
from trainer.sweep.definition.warm_start import WarmStartError, gather, sweep_names
from trainer.sweep.search import space
from trainer.sweep.search.dispatch import ClassicEngine
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import UnknownSweep

COMMAND = ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}", "model=small_cnn"]
LR = {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.1}
CONFIG = {
    "method": "bayes",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": LR},
    "command": COMMAND,
}
RUNS = [({"optimizer.lr": 0.003}, 0.6), ({"optimizer.lr": 0.03}, 0.8), ({"optimizer.lr": 0.5}, 0.1)]


@pytest.mark.parametrize(
    "value, names",
    [(None, []), ("a1", ["a1"]), ("a1,b2", ["a1", "b2"]), (["a1", " b2 "], ["a1", "b2"])],
)
def test_sweep_names(value, names):
    assert sweep_names(value) == names


def test_the_runs_inside_the_new_space_reach_the_engine(tmp_path, capsys):
    earlier, _ = finished_sweep(
        tmp_path, {**CONFIG, "parameters": {"optimizer.lr": {**LR, "max": 1.0}}}, RUNS
    )
    warm = gather(earlier, CONFIG, tmp_path, None)
    assert warm.sweeps == [earlier] and warm.considered == 3
    assert [p["params"] for p in warm.prior_runs] == [
        {"optimizer.lr": 0.003},
        {"optimizer.lr": 0.03},
    ]
    assert warm.prior_runs[0]["history"] == [{"val/acc": 0.3}, {"val/acc": 0.6}]
    store = SweepStore(tmp_path / "new.db")
    store.set("config", CONFIG)
    warm.record(store)
    engine = ClassicEngine(store, CONFIG)
    run = engine.claim(agent_pid=os.getpid(), rerun_crashed=False, stop=lambda: False)
    assert run.search_info["results_known"] == 2  # the two prior runs, before any of its own
    assert all(r.id.startswith(f"{earlier}/") for r in space.prior_runs(store, CONFIG))


def test_grid_and_random_ignore_it_with_a_note(tmp_path, capsys):
    earlier, _ = finished_sweep(tmp_path, CONFIG, RUNS)
    assert gather(earlier, {**CONFIG, "method": "random"}, tmp_path, None) is None
    assert "method random learns nothing from earlier runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, said",
    [
        ({"metric": {"name": "val/loss", "goal": "minimize"}}, "ranked its runs by"),
        ({"command": [*COMMAND[:-1], "model=resnet18"]}, "trained model=small_cnn"),
        ({"command": [*COMMAND, "data=cifar10"]}, "trained data=(default)"),
    ],
)
def test_another_metric_model_or_data_set_is_refused(tmp_path, change, said):
    earlier, _ = finished_sweep(tmp_path, CONFIG, RUNS)
    with pytest.raises(WarmStartError) as refused:
        gather(earlier, {**CONFIG, **change}, tmp_path, None)
    assert said in str(refused.value) and refused.value.exit_code == 2


def test_an_unknown_sweep_says_did_you_mean(tmp_path):
    earlier, _ = finished_sweep(tmp_path, CONFIG, RUNS)
    with pytest.raises(UnknownSweep, match=f"did you mean {earlier}"):
        typo = earlier[:-1] + ("x" if earlier[-1] != "x" else "y")  # one letter off, always
        gather(typo, CONFIG, tmp_path, None)
