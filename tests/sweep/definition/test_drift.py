"""A sweep command given an existing sweep (hydra.sweeper.sweep_id, or a hydra.sweep.dir holding
one) with another definition: refused, exit 2, the difference key by key in 80 columns and the
two ways on (extend it, or a new sweep), the store untouched; the same definition resumes."""

from __future__ import annotations

import sys

import pytest
import yaml

import trainer.__main__
from tests.sweep_commands import TRIAL
from trainer.sweep import local, server
from trainer.sweep.definition import drift
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout

GRID = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"optimizer.lr": {"values": [0.1, 0.05]}},
    "command": [*TRIAL, "trainer.max_epochs=3"],
}
WIDER = {**GRID, "parameters": {"optimizer.lr": {"values": [0.1, 0.05, 0.02]}}}


def test_the_difference_is_shown_key_by_key():
    assert drift.differences(GRID, WIDER) == [
        "parameters.optimizer.lr: was {values: [0.1, 0.05]}, now {values: [0.1, 0.05, 0.02]}"
    ]
    other = {**GRID, "metric": {"name": "val/loss", "goal": "maximize"}, "run_cap": 8}
    assert drift.differences(GRID, other) == [
        "metric.name: was val/acc, now val/loss",
        "run_cap: was unset, now 8",
    ]
    assert drift.differences(other, GRID)[-1] == "run_cap: was 8, now unset"


def test_the_same_definition_has_no_difference_whatever_its_spelling():
    nested = {**GRID, "parameters": {"optimizer": {"parameters": {"lr": {"values": (0.1, 0.05)}}}}}
    assert drift.differences(GRID, nested) == []  # nested blocks and tuples as the store has them
    assert drift.refusal("k", "s1", SweepLayout("d").yaml, GRID, dict(GRID), "x") is None


def test_a_long_command_says_what_left_and_what_came():
    longer = {**GRID, "command": [*TRIAL, "trainer.max_epochs=5"]}
    assert drift.differences(GRID, longer) == [
        "command: dropped [trainer.max_epochs=3], added [trainer.max_epochs=5]"
    ]


def test_a_growable_difference_names_the_extend_command_and_the_new_sweep():
    message = drift.refusal(
        "hydra.sweeper.sweep_id=s1", "s1", SweepLayout("/o/s1").yaml, GRID, WIDER, "drop it"
    )
    lines = message.splitlines()
    assert all(len(line) <= drift.WIDTH for line in lines)
    assert len("error: " + lines[0]) <= drift.WIDTH
    assert "    python -m trainer.sweep extend s1 optimizer.lr=0.1,0.05,0.02" in lines
    flat = " ".join(message.split())  # as it reads, whatever the line breaks
    assert "hydra.sweeper.warm_start=s1" in flat and "Nothing was started" in flat


def test_a_new_metric_or_method_has_only_the_new_sweep_way():
    changed = {**WIDER, "method": "bayes", "metric": {"name": "val/loss"}}
    message = drift.refusal("k", "s1", SweepLayout("/o/s1").yaml, GRID, changed, "drop it")
    flat = " ".join(message.split())
    assert "extend s1 " not in flat
    assert "method, metric cannot change under the runs of sweep s1" in flat
    assert "start a new sweep: drop it" in flat


def _made(tmp_path, config=GRID) -> tuple[SweepLayout, SweepStore]:
    """Sweep s1 under tmp_path with one running run (its agent gone)."""
    layout = SweepLayout.under(tmp_path, "s1")
    store = SweepStore(layout.db)
    store.set("config", config)
    store.set("sweep_id", "s1")
    store.set("state", "running")
    store.claim(lambda runs: ({"optimizer.lr": 0.1}, None), new_id=lambda: "r1", agent_pid=1)
    return layout, store


def _untouched(store: SweepStore) -> tuple:
    return store.get("state"), store.config, [(r.id, r.state) for r in store.runs()]


def test_resuming_with_another_definition_is_refused_with_nothing_changed(tmp_path):
    _, store = _made(tmp_path)
    before = _untouched(store)
    with pytest.raises(drift.DefinitionDrift) as refused:
        run_sweep(WIDER, SweepOptions(sweep_id="s1"), root=tmp_path)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("hydra.sweeper.sweep_id=s1: ")
    assert _untouched(store) == before  # the lost run was not even given back


def test_a_sweep_dir_holding_another_definition_is_refused(tmp_path):
    target = tmp_path / "mine"
    layout = SweepLayout(target)
    store = SweepStore(layout.db)
    store.set("config", GRID)
    store.set("sweep_id", "s2")
    with pytest.raises(drift.DefinitionDrift, match="set hydra.sweep.dir to a new directory"):
        local._create(WIDER, tmp_path, target)
    assert not layout.yaml.exists() and not (tmp_path / "sweeps").exists()  # nothing made


def test_joining_a_w_and_b_sweep_created_here_with_another_definition_is_refused(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # refused before any key is looked for
    layout = SweepLayout.under(tmp_path, "abc12345")
    layout.root.mkdir(parents=True)
    created = {**GRID, "command": server.resumable_trial_command(GRID["command"], None)}
    layout.yaml.write_text(yaml.safe_dump(created))
    options = SweepOptions(project="p", entity="e", sweep_id="abc12345", agents=0)
    with pytest.raises(drift.DefinitionDrift, match="parameters.optimizer.lr: was"):
        server.run_server_sweep(WIDER, options, root=tmp_path)
    with pytest.raises(server.ServerUnavailable, match="wandb login"):  # the same one: on
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
        server.run_server_sweep(GRID, options, root=tmp_path)


class _Agent:
    """An agent process that ends at once (the sweep command's Popen)."""

    def __init__(self, argv, env=None, **_):
        self.argv = argv

    def poll(self):
        return 0

    def wait(self):
        return 0


def _sweep_command(monkeypatch, *argv: str) -> int:
    """`python -m trainer -m ARGV` in this process (Hydra's own command line); its exit code."""
    monkeypatch.setattr(sys, "argv", ["trainer", "-m", "hydra/sweeper=wandb", *argv])
    try:
        trainer.__main__.main()
    except SystemExit as done:
        return int(done.code or 0)
    return 0


def test_the_sweep_command_resumes_the_same_definition_and_refuses_another(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(local.subprocess, "Popen", _Agent)  # its agents end at once
    base = ["hydra.sweeper.method=grid", "compile=off", "logger=none"]
    assert _sweep_command(monkeypatch, *base, "optimizer.lr=0.1,0.05") == 0
    (db,) = (tmp_path / "outputs" / "sweeps").glob("*/sweep.db")
    sweep_id, store = db.parent.name, SweepStore(db)
    again = [*base, f"hydra.sweeper.sweep_id={sweep_id}", "hydra.sweeper.agents=2"]
    assert _sweep_command(monkeypatch, *again, "optimizer.lr=0.1,0.05") == 0  # runner: free
    assert f"sweep {sweep_id}: resuming" in capsys.readouterr().out
    before = _untouched(store)
    assert _sweep_command(monkeypatch, *again, "optimizer.lr=0.1,0.05,0.02") == 2
    err = capsys.readouterr().err
    flat = " ".join(err.split())
    assert (
        "parameters.optimizer.lr: was {values: [0.1, 0.05]}, now {values: [0.1, 0.05, 0.02]}"
        in flat
    )
    assert f"    python -m trainer.sweep extend {sweep_id} optimizer.lr=0.1,0.05,0.02\n" in err
    assert f"hydra.sweeper.warm_start={sweep_id}" in flat and "Traceback" not in err
    assert all(len(line) <= drift.WIDTH for line in err.splitlines())
    assert _untouched(store) == before
    store.close()
