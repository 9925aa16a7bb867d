"""`~` and `$VAR` in every path key: on the command line as typed, and where paths are read."""

from __future__ import annotations

import os

import pytest

from tests.conftest import make_cfg, run_cli
from trainer.config.paths import expand_path_argv
from trainer.config.schema import ConfigError
from trainer.preflight import validate


def test_argv_tilde_and_var_become_plain_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATA_HOME", "/srv/sets")
    argv = expand_path_argv(
        [
            "trainer",
            "data.root=~/data",
            "compile.cache_dir=$DATA_HOME/cache",
            "+paths.output_dir='~/runs'",
            "checkpoint=~/a b/last.pt",
            "paths.data_dir=${oc.env:X,data}",
            "model.name=~odd",
            "data.root=~/a,~/b",
        ]
    )
    assert argv[1] == f"data.root={tmp_path}/data"
    assert argv[2] == "compile.cache_dir=/srv/sets/cache"
    assert argv[3] == f"+paths.output_dir={tmp_path}/runs"
    assert argv[4] == f"checkpoint={tmp_path}/a b/last.pt"  # Hydra reads it back as is
    assert argv[5:7] == ["paths.data_dir=${oc.env:X,data}", "model.name=~odd"]
    assert argv[7] == f"data.root={tmp_path}/a,{tmp_path}/b"  # a multirun sweep stays one


def test_every_path_key_is_expanded_when_read(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNS", "/srv/runs")
    conf = validate(
        make_cfg(
            "data.root='~/data'",
            "paths.output_dir='$RUNS/out'",
            "compile.cache_dir='~/cache'",
            "trainer.resume='~/last.pt'",
        )
    )
    assert conf.data.root == f"{tmp_path}/data"
    assert conf.paths.output_dir == "/srv/runs/out"
    assert conf.compile.cache_dir == f"{tmp_path}/cache"
    assert conf.trainer.resume == f"{tmp_path}/last.pt"
    assert validate(make_cfg("trainer.resume=auto")).trainer.resume == "auto"


@pytest.mark.slow
def test_readme_tilde_example_is_accepted_as_typed(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = run_cli("data=cifar10", "data.root=~/data", "logger=none", cwd=tmp_path, env=env,
                   timeout=120)  # fmt: skip
    assert proc.returncode == 2  # no CIFAR-10 there: the data set's own error, not Hydra's lexer
    assert "LexerNoViableAlt" not in proc.stderr and "Traceback" not in proc.stderr
    assert f"{tmp_path}/data" in proc.stderr


def test_options_with_a_backend_that_ignores_them_are_refused():
    with pytest.raises(ConfigError, match="compile.backend=aot_eager ignores"):
        validate(make_cfg("compile.backend=aot_eager", "compile.options={epilogue_fusion: true}"))


def test_fp16_on_the_cpu_is_warned_with_the_fix(caplog):
    with caplog.at_level("WARNING", logger="trainer.preflight"):
        validate(make_cfg("trainer.device=cpu", "trainer.precision=16-mixed"))
    assert "trainer.precision=32" in caplog.text and "slower" in caplog.text


@pytest.mark.slow
def test_a_rejected_run_leaves_no_run_directory(tmp_path):
    proc = run_cli("logger=none", "trainer.max_epochs=0", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "trainer.max_epochs" in proc.stderr
    runs = tmp_path / "outputs" / "runs"
    assert not runs.exists() or not any(runs.rglob("*")), list(runs.rglob("*"))


@pytest.mark.slow
def test_help_names_the_app_and_the_log_is_train_log(tmp_path):
    proc = run_cli("--help", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0
    assert "powered by Hydra" not in proc.stdout and "python -m trainer" in proc.stdout
    assert "compile.target=blocks" in proc.stdout and "data.root=~/data" in proc.stdout
    run = run_cli("logger=none", "compile=off", "data=fake", "data.num_samples=16",
                  "data.batch_size=8", "trainer.max_epochs=1", cwd=tmp_path, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert list((tmp_path / "outputs" / "runs").rglob("train.log"))
    assert not list((tmp_path / "outputs" / "runs").rglob("__main__.log"))
