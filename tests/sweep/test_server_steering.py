"""W&B's verbs on a backend=wandb sweep, at their contract (these machines cannot reach W&B):
`python -m trainer.sweep pause | resume | stop | cancel SWEEP` runs W&B's own `wandb sweep
--VERB ENTITY/PROJECT/SWEEP_ID` (argv and environment checked against W&B's parser), `stop SWEEP
RUN` is the public API's Run.stop(); a verb that does not apply, an unknown run and missing
credentials are refused within seconds, exit 2, with nothing sent."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from wandb.cli import cli as wandb_cli

from tests.sweep.test_server import SWEEP_ID, local_server  # noqa: F401  (the fixture)
from trainer.sweep import server_steering
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.store.directory import SweepLayout, record_wandb

PATH = f"team/proj/{SWEEP_ID}"


class Run:
    """A run as the public API's sweep lists it: its id, W&B state and Stop run."""

    def __init__(self, run_id: str, state: str) -> None:
        self.id, self.state, self.stopped = run_id, state, False

    def stop(self) -> None:
        self.stopped = True


class Server:
    """wandb.Api standing in for the W&B server: one sweep, its state and runs; the paths
    asked for and the commands run."""

    state = "RUNNING"
    runs = [Run("r-live", "running"), Run("r-done", "finished")]
    asked: list[str] = []
    commands: list[tuple[list[str], dict]] = []

    def sweep(self, path: str):
        Server.asked.append(path)
        return self


@pytest.fixture
def w_and_b(local_server, monkeypatch, tmp_path):  # noqa: F811
    """The stand-in server, W&B's command recorded, and sweep SWEEP_ID recorded under tmp_path
    as a backend=wandb sweep command records it."""
    Server.state, Server.asked, Server.commands = "RUNNING", [], []
    Server.runs = [Run("r-live", "running"), Run("r-done", "finished")]

    def run(argv, env, **_):
        Server.commands.append((argv, env))
        return subprocess.CompletedProcess(argv, 0, "Done.", "")

    monkeypatch.setattr(server_steering.wandb, "Api", Server)
    monkeypatch.setattr(server_steering.subprocess, "run", run)
    record_wandb(SweepLayout.under(tmp_path, SWEEP_ID), PATH, os.environ["WANDB_BASE_URL"])
    return tmp_path


def _cli(root, *argv) -> int:
    try:
        return sweep_cli(["--root", str(root), *argv])
    except SystemExit as done:
        return int(done.code)


@pytest.mark.parametrize(
    "verb, state",
    [("pause", "RUNNING"), ("resume", "PAUSED"), ("stop", "PAUSED"), ("cancel", "RUNNING")],
)
def test_each_verb_is_w_and_b_own_command(w_and_b, capsys, monkeypatch, verb, state):
    Server.state = state
    assert _cli(w_and_b, verb, SWEEP_ID) == 0  # by its local id
    ((argv, env),) = Server.commands
    assert argv == [sys.executable, "-m", "wandb", "sweep", f"--{verb}", PATH]
    assert env["WANDB_MODE"] == "online" and env["WANDB_BASE_URL"] == os.environ["WANDB_BASE_URL"]
    parsed = wandb_cli.sweep.make_context("sweep", argv[4:]).params  # W&B's own parser
    assert parsed[verb] is True and parsed["config_yaml_or_sweep_id"] == PATH
    assert sum(parsed[v] for v in ("pause", "resume", "stop", "cancel")) == 1
    out = capsys.readouterr().out
    assert f"sweep {PATH}: " in out and f"`wandb sweep --{verb} {PATH}`" in out


def test_a_w_and_b_path_or_the_sweep_directory_names_it_too(w_and_b, capsys):
    assert _cli(w_and_b, "pause", "other/proj/zzz") == 0
    assert _cli(w_and_b, "pause", str(SweepLayout.under(w_and_b, SWEEP_ID).root)) == 0
    assert [argv[-1] for argv, _ in Server.commands] == ["other/proj/zzz", PATH]


def test_a_verb_that_does_not_apply_is_refused_and_nothing_sent(w_and_b, capsys):
    Server.state = "RUNNING"
    assert _cli(w_and_b, "resume", SWEEP_ID) == 2
    err = capsys.readouterr().err
    assert "W&B says the sweep is RUNNING" in err and "PAUSED" in err and err.count("\n") == 1
    Server.state = "FINISHED"
    assert _cli(w_and_b, "cancel", SWEEP_ID) == 2
    assert Server.commands == []


def test_w_and_b_command_failing_is_its_error(w_and_b, capsys, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "wandb: ERROR Sweep already finished.\n")
    monkeypatch.setattr(server_steering.subprocess, "run", lambda argv, env, **_: failed)
    assert _cli(w_and_b, "stop", SWEEP_ID) == 1
    assert "Sweep already finished." in capsys.readouterr().err


def test_stop_run_is_the_public_apis_stop(w_and_b, capsys):
    assert _cli(w_and_b, "stop", SWEEP_ID, "r-live") == 0
    assert [r.id for r in Server.runs if r.stopped] == ["r-live"] and Server.commands == []
    assert "r-live flagged to stop" in capsys.readouterr().out


def test_an_unknown_or_ended_run_is_refused_and_none_stopped(w_and_b, capsys):
    assert _cli(w_and_b, "stop", SWEEP_ID, "r-live", "r-liv") == 2
    assert "did you mean r-live?" in capsys.readouterr().err
    assert _cli(w_and_b, "stop", SWEEP_ID, "r-live", "r-done") == 2
    assert "r-done (finished) not running" in capsys.readouterr().err
    assert not any(r.stopped for r in Server.runs)


def test_without_credentials_a_clear_error_within_seconds(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    started = time.monotonic()
    assert _cli(tmp_path, "pause", PATH) == 2
    err = capsys.readouterr().err
    assert "wandb login" in err and f"{PATH} is a W&B sweep" in err
    assert time.monotonic() - started < 5
