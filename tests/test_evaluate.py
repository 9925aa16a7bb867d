"""`python -m trainer.evaluate`: a checkpoint of an eager and of a compiled run evaluates to
the run's own validation accuracy, with latency and throughput figures; bad paths exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import CONF, ROOT
from trainer.config.hydra_version import VERSION_BASE
from trainer.config.schema import ConfigError
from trainer.evaluate import evaluate_checkpoint
from trainer.run import run


def eval_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), **VERSION_BASE):
        return compose(config_name="evaluate", overrides=list(overrides))


@pytest.mark.slow
@pytest.mark.parametrize(
    "train_compile",
    [["compile=off"], ["compile.backend=aot_eager"]],
    ids=["eager-checkpoint", "compiled-checkpoint"],
)
def test_evaluate_reports_the_runs_accuracy(cfg_factory, tmp_path, train_compile):
    train_dir = tmp_path / "train"
    result = run(
        cfg_factory("logger=none", "trainer.max_epochs=1", *train_compile), run_dir=train_dir
    )
    checkpoint = train_dir / "checkpoints" / "last.pt"
    report = evaluate_checkpoint(
        eval_cfg(f"checkpoint={checkpoint}", "compile.backend=aot_eager", "eval.steps=5"),
        run_dir=tmp_path / "eval",
    )
    written = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert written == report
    assert report["val/acc"] == pytest.approx(result["val/acc"], abs=1e-12)
    assert report["val/samples"] == 359  # every digits validation sample, none dropped
    assert report["model"] == "small_cnn" and report["data"] == "digits"
    lat = report["latency_ms"]
    assert lat["first_call"] > 0 and 0 < lat["p50"] <= lat["p95"]
    assert report["samples_per_s"] > 0 and report["steps"] == 5 and report["warmup"] == 3
    assert report["compile"]["enabled"] and report["compile"]["graphs"] == 1


def test_missing_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"checkpoint=.*does not exist"):
        evaluate_checkpoint(eval_cfg(f"checkpoint={tmp_path / 'no.pt'}"), run_dir=tmp_path)


@pytest.mark.slow
def test_corrupt_checkpoint_exits_2(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.evaluate", f"checkpoint={bad}"],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"checkpoint={bad} is not a readable checkpoint" in proc.stderr


@pytest.mark.slow
def test_help_lists_only_the_groups_that_compose_here():
    out = subprocess.run(
        [sys.executable, "-m", "trainer.evaluate", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    groups_text = out.split("== Configuration groups")[1].split("== Config")[0]
    listed = {}
    for line in groups_text.splitlines()[1:]:
        if ":" in line:
            group, options = line.split(":", 1)
            listed[group] = [o.strip() for o in options.split("(")[0].split(",")]
    assert set(listed) == {"compile", "data", "paths"}
    for group, options in listed.items():
        assert options == sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        for option in options:
            assert eval_cfg("checkpoint=x", f"{group}={option}")[group] is not None
    for group in ("model", "optimizer", "scheduler", "trainer", "logger", "sweep"):
        with pytest.raises(Exception, match="Could not override"):
            eval_cfg("checkpoint=x", f"{group}={next((CONF / group).glob('*.yaml')).stem}")
    assert "powered by Hydra" not in out.splitlines()[0]
