"""`python -m trainer.sweep extend SWEEP OVERRIDES --no-run`: the new revision (sweep.yaml
rewritten, the previous kept as sweep.r1.yaml, every revision in the store and results.json),
the refusals (one paragraph, exit 2, nothing changed), and live agents and a scheduler's
optimizer following the new definition without a restart."""

from __future__ import annotations

import json
import os

import pytest

from tests.sweep.finished_sweep import finished_sweep
from tests.sweep_commands import TRIAL
from trainer.sweep import local
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.agents.local_agent import LocalAgent
from trainer.sweep.definition import drift
from trainer.sweep.local import RUNNER_KEY
from trainer.sweep.search import space
from trainer.sweep.search.suggest.driver import SchedulerDriver
from trainer.sweep.store import steering
from trainer.sweep.store.directory import SweepLayout, record_wandb
from trainer.sweep.store.suggestions import SuggestionQueue

LR = {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.1}
CONFIG = {
    "method": "bayes",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": LR},
    "run_cap": 2,
    "command": [*TRIAL, "trainer.max_epochs=1"],
}
RUNS = [({"optimizer.lr": 0.003}, 0.6), ({"optimizer.lr": 0.03}, 0.8)]


def _cli(root, *argv) -> int:
    try:
        return sweep_cli(["--root", str(root), *argv])
    except SystemExit as done:
        return int(done.code)


@pytest.fixture
def finished(tmp_path):
    sweep_id, store = finished_sweep(tmp_path, CONFIG, RUNS)
    yield tmp_path, sweep_id, store, SweepLayout.under(tmp_path, sweep_id)
    store.close()


def test_no_run_records_the_revision_and_prints_the_join_line(finished, capsys):
    root, sweep_id, store, layout = finished
    assert _cli(root, "extend", sweep_id, "hydra.sweeper.run_cap=6", "--no-run") == 0
    out = capsys.readouterr().out
    assert f"python -m trainer.agent {sweep_id}" in out and "run_cap: was 2, now 6" in out
    assert store.config["run_cap"] == 6 and space.revision(store) == 2
    assert "run_cap: 2" in layout.revision(1).read_text()
    assert "run_cap: 6" in layout.yaml.read_text()
    state, change = store.lifecycle()
    assert state == "running" and change.verb == "extend"  # a finished sweep runs again
    assert "extended by" in change.said()
    res = json.loads(layout.results.read_text())
    assert [(r["revision"], r["file"]) for r in res["revisions"]] == [
        (1, "sweep.r1.yaml"),
        (2, "sweep.yaml"),
    ]
    assert (
        _cli(root, "extend", sweep_id, "optimizer.lr=tag(log, interval(0.0001, 1.0))", "--no-run")
        == 0
    )
    assert layout.revision(2).is_file() and space.revision(store) == 3
    res = json.loads(layout.results.read_text())
    assert [r["file"] for r in res["revisions"]] == ["sweep.r1.yaml", "sweep.r2.yaml", "sweep.yaml"]


def _refused(capsys, root, store, layout, *argv) -> str:
    before = (store.config, store.get("state"), store.get(steering.STEERED_KEY))
    capsys.readouterr()
    assert _cli(root, "extend", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1  # one paragraph
    assert (store.config, store.get("state"), store.get(steering.STEERED_KEY)) == before
    assert not layout.revision(1).exists() and space.revision(store) == 1
    return err


@pytest.mark.parametrize(
    "override, said",
    [
        ("hydra.sweeper.metric.name=val/loss", "the metric would change"),
        ("hydra.sweeper.method=random", "hydra.sweeper.warm_start="),
        ("optimizer.lr=tag(log, interval(0.001, 0.01))", "leaves out its best run"),
    ],
)
def test_refusals_change_nothing(finished, capsys, override, said):
    root, sweep_id, store, layout = finished
    assert said in _refused(capsys, root, store, layout, sweep_id, override)


def test_a_cancelled_or_unknown_sweep_is_refused(finished, capsys):
    root, sweep_id, store, layout = finished
    typo = sweep_id[:-1] + ("x" if sweep_id[-1] != "x" else "y")  # one letter off, always
    err = _refused(capsys, root, store, layout, typo, "hydra.sweeper.run_cap=6")
    assert f"did you mean {sweep_id}?" in err
    store.set("state", "running")
    store.steer("cancel", sweep_id, "ada@node1")
    err = _refused(capsys, root, store, layout, sweep_id, "hydra.sweeper.run_cap=6")
    assert "was cancelled" in err and "hydra.sweeper.warm_start=" in err


def test_a_live_agent_follows_the_new_revision(finished):
    root, sweep_id, store, layout = finished
    agent = LocalAgent(layout, rerun_crashed=False, max_consecutive_failures=1)
    assert not agent._revised()
    assert _cli(root, "extend", sweep_id, "hydra.sweeper.run_cap=3", "--no-run") == 0
    assert agent._revised()
    engine = agent.engine
    agent._follow_revision()
    assert agent.config["run_cap"] == 3 and agent.engine is not engine and not agent._revised()
    run = agent.engine.claim(agent_pid=os.getpid(), rerun_crashed=False, stop=lambda: False)
    assert run.search_info["results_known"] == 2  # told the two old runs; a third, new point
    assert run.params["optimizer.lr"] not in (0.003, 0.03)
    agent.store.close()


def test_an_optimizer_is_rebuilt_from_the_new_space(tmp_path):
    pytest.importorskip("optuna")
    config = {**CONFIG, "method": "custom", "scheduler": {"engine": "optuna"}, "run_cap": 4}
    sweep_id, store = finished_sweep(tmp_path, config, RUNS)
    layout = SweepLayout.under(tmp_path, sweep_id)
    driver = SchedulerDriver(store, layout, config, sweep_id)
    queue = SuggestionQueue(store)
    queue.wait(os.getpid(), True)
    driver.step(force=True)
    (first,) = queue.queued()
    assert first.info["results_known"] == 2
    # widened above, narrowed below: the run at 0.003 falls outside, the best (0.03) stays
    assert (
        _cli(tmp_path, "extend", sweep_id, "optimizer.lr=tag(log, interval(0.01, 1.0))", "--no-run")
        == 0
    )
    assert queue.queued() == []  # the old space's suggestion is dropped
    driver.step(force=True)
    (second,) = queue.queued()
    assert second.info["results_known"] == 1  # rebuilt, told the one run inside the new space
    assert 0.01 <= second.params["optimizer.lr"] <= 1.0
    driver.close()
    store.close()


def test_a_parameter_added_with_the_value_the_runs_had(finished, capsys):
    root, sweep_id, store, layout = finished
    argv = [sweep_id, "optimizer.weight_decay=0.0005,0.01", "--no-run"]
    err = _refused(capsys, root, store, layout, *argv)
    assert "--default optimizer.weight_decay=VALUE" in err
    assert _cli(root, "extend", *argv, "--default", "optimizer.weight_decay=0.0005") == 0
    assert store.config[space.ADDED_KEY] == {"optimizer.weight_decay": 0.0005}
    assert store.config["parameters"]["optimizer.weight_decay"] == {"values": [0.0005, 0.01]}
    assert "told the 2 finished run(s) inside the new space" in capsys.readouterr().out


def test_a_sweep_run_by_launcher_jobs_is_recorded_and_says_how_to_start_them(finished, capsys):
    root, sweep_id, store, layout = finished
    store.set(RUNNER_KEY, {"agents": 2, "count": None, "launcher": True})
    assert _cli(root, "extend", sweep_id, "hydra.sweeper.run_cap=3") == 0
    out = capsys.readouterr().out
    assert "jobs of a Hydra launcher" in out and f"python -m trainer.agent {sweep_id}" in out
    assert space.revision(store) == 2 and len(store.runs()) == 2  # nothing was run here


def test_a_wandb_server_sweep_is_refused_with_the_way_on(tmp_path, capsys):
    record_wandb(SweepLayout.under(tmp_path, "w1"), "team/proj/abc123", "")
    assert _cli(tmp_path, "extend", "w1", "hydra.sweeper.run_cap=8") == 2
    err = capsys.readouterr().err
    assert "team/proj/abc123" in err and "wandb sweep --prior_run" in err


def test_the_command_that_started_an_extended_sweep_resumes_it_as_it_now_stands(finished, capsys):
    """The sweep command given the definition of an earlier revision resumes the sweep with
    its current one (a note says so); any other definition is still refused."""
    root, sweep_id, store, layout = finished
    assert _cli(root, "extend", sweep_id, "hydra.sweeper.run_cap=6", "--no-run") == 0
    capsys.readouterr()
    given = f"hydra.sweeper.sweep_id={sweep_id}"
    local._same_definition(given, sweep_id, layout, store, CONFIG, "drop it")
    assert "gives revision 1 of its definition" in capsys.readouterr().out
    assert store.config["run_cap"] == 6  # the current revision is what runs
    other = {**CONFIG, "run_cap": 9}
    with pytest.raises(drift.DefinitionDrift):
        local._same_definition(given, sweep_id, layout, store, other, "drop it")
