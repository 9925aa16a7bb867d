"""What the project asks of Hydra works on Hydra 1.3 and 1.4 alike (whichever this environment
has): no deprecation or migration warning from its entry points, `python -m trainer
sweep=<name>` runs the sweep without -m, and the sweep definitions compose."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import hydra
import pytest
from hydra.types import RunMode

from tests.conftest import ROOT, make_cfg, run_cli
from trainer.__main__ import sweep_as_multirun
from trainer.config.hydra_version import VERSION_BASE, _release

WARNED = ("Warning:", "version_base", "deprecated")  # what a warning line on a terminal holds


def test_version_base_is_given_where_hydra_wants_it():
    assert _release("1.3.8") == (1, 3) and _release("1.4.0rc3") == (1, 4)
    if _release(hydra.__version__) < (1, 4):
        assert VERSION_BASE == {"version_base": "1.3"}  # left out, 1.3 assumes 1.1 and warns
    else:
        assert VERSION_BASE == {}  # 1.4 warns whenever it is given


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings that Hydra or OmegaConf raised, or that point at the project's code."""
    return [
        f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}"
        for w in caught
        if w.category.__module__.split(".")[0] in ("hydra", "omegaconf")
        or any(part in w.filename for part in ("/hydra/", "/omegaconf/", "/trainer/", "/tests/"))
    ]


def test_the_entry_points_and_the_compose_api_warn_nothing(monkeypatch, capsys):
    import trainer.__main__
    import trainer.evaluate

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.reload(trainer.__main__)  # @hydra.main runs again
        importlib.reload(trainer.evaluate)
        make_cfg("sweep=lr_random")
        monkeypatch.setattr(sys, "argv", ["trainer", "sweep=lr_params", "--cfg", "hydra"])
        trainer.__main__.main()  # Hydra's own command line, in this process
    assert _ours(caught) == []
    assert "mode: MULTIRUN" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep=lr_random"],
        ["sweep=lr_random", "hydra.sweeper.dry_run=true", "trainer.seed=3"],
        ["--config-dir", "/my/conf", "sweep=mine"],
        ["+sweep=mine"],
        ["sweep=lr_random", "sweep=lr_bayes"],
    ],
)
def test_a_sweep_choice_runs_as_a_multirun(argv):
    assert sweep_as_multirun(["trainer", *argv]) == ["trainer", "--multirun", *argv]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["model=resnet18", "optimizer.lr=0.1"],
        ["-m", "sweep=lr_random"],
        ["sweep=lr_random", "--multirun"],
        ["sweep=lr_random", "hydra.mode=RUN", "optimizer.lr=0.1"],  # a sweep's trial
        ["sweep=lr_random", "hydra.mode=MULTIRUN"],
        ["sweep=lr_random", "hydra={mode: RUN}"],
        ["sweep=lr_random", "--run"],
        ["sweep=lr_random", "--cfg", "job"],
        ["sweep=lr_random", "-c", "hydra", "--resolve"],
        ["sweep=lr_random", "--info"],
        ["sweep=lr_random", "--help"],
        ["sweep=lr_random", "--hydra-help"],
        ["sweep=lr_random", "--version"],
        ["sweep=lr_random", "--no-such-flag"],  # Hydra says what is wrong
        ["sweep=lr_random", "optimizer.lr=(("],
        ["sweep=null"],
        ["~sweep"],
        ["sweep=lr_random,lr_bayes"],
        ["sweep@other=lr_random"],
    ],
)
def test_the_command_line_keeps_its_own_choice(argv):
    assert sweep_as_multirun(["trainer", *argv]) == ["trainer", *argv]


def _output(*args: str, module: str = "trainer") -> str:
    """stdout and stderr of `python -m MODULE ARGS`, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--cfg", "job"],
        ["sweep=lr_random", "hydra.sweeper.dry_run=true"],  # the README's first sweep command
        ["-m", "sweep=lr_random", "hydra.sweeper.dry_run=true"],
        ["sweep=lr_params", "hydra.sweeper.dry_run=true"],
        ["compile=off", "logger=none", "trainer.max_epochs=1", "trainer.max_steps=2"],
    ],
)
def test_no_warning_line_reaches_the_terminal(args):
    output = _output(*args)
    assert [line for line in output.splitlines() if any(w in line for w in WARNED)] == []


@pytest.mark.slow
def test_the_evaluate_entry_point_warns_nothing():
    output = _output("--help", module="trainer.evaluate")
    assert [line for line in output.splitlines() if any(w in line for w in WARNED)] == []


@pytest.mark.slow
def test_a_sweep_without_m_runs_as_with_m():
    without = run_cli("sweep=lr_random", "hydra.sweeper.dry_run=true")
    with_m = run_cli("-m", "sweep=lr_random", "hydra.sweeper.dry_run=true")
    assert without.returncode == with_m.returncode == 0, without.stderr + with_m.stderr
    assert without.stdout.rpartition("# written")[0] == with_m.stdout.rpartition("# written")[0]


@pytest.mark.parametrize(
    "overrides, mode",
    [
        (["trainer.seed=1", "hydra.mode=RUN"], "RUN"),
        (["hydra.mode=RUN", "hydra.mode=MULTIRUN"], "MULTIRUN"),  # the last one wins
        (["trainer.seed=1"], None),  # not on the command line: composition decides
        (["hydra.mode=RUN,MULTIRUN"], None),  # a sweep of it: Hydra's own error
        (["~hydra.mode"], None),
        (["hydra.mode=RUN", "hydra={mode: MULTIRUN}"], None),
        (["hydra.mode=WALK"], None),  # Hydra says what is wrong with it
    ],
)
def test_a_command_line_mode_is_read_without_composing(overrides, mode):
    from trainer.config.hydra_version import _command_line_mode

    assert _command_line_mode(overrides) == (None if mode is None else RunMode[mode])


def test_hydra_13_gets_a_command_line_mode_without_composing_the_config(monkeypatch):
    """A sweep trial's `hydra.mode=RUN`: Hydra 1.3's get_mode answers it without the composition
    that Hydra 1.4 also skips; without it, get_mode composes as before."""
    from hydra._internal.hydra import Hydra

    from trainer.config.hydra_version import mode_without_composing

    composed = []
    monkeypatch.setattr(Hydra, "get_mode", lambda self, name, overrides: composed.append(1))
    mode_without_composing()
    if _release(hydra.__version__) >= (1, 4):
        assert not getattr(Hydra.get_mode, "reads_command_line", False)
        return
    mode_without_composing()  # once only: it does not wrap itself
    assert Hydra.get_mode(None, "train", ["a=1", "hydra.mode=RUN"]) == RunMode.RUN
    assert composed == []
    assert Hydra.get_mode(None, "train", ["a=1"]) is None and composed == [1]
