"""benchmarks/sweep_engines.py: its sweeps are valid commands (the TPE one with its seeded study
factory passes every pre-launch check) and its summary is right on known values."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import sweep_engines


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["random", "tpe"])
def test_each_sweep_command_passes_the_checks_before_launch(engine, tmp_path):
    argv = sweep_engines.command(engine, seed=1, budget=4, steps=5, folder=tmp_path)
    assert "hydra.sweeper.run_cap=4" in argv and "trainer.seed=1" in argv
    if engine == "random":
        assert "hydra.sweeper.method=random" in argv
        return
    study = (tmp_path / "study_1.py").read_text()
    assert "TPESampler(seed=1, n_startup_trials=3)" in study
    done = subprocess.run([*argv, "hydra.sweeper.dry_run=true"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "engine: optuna" in done.stdout and "optimizer: seeded" in done.stdout


def test_the_summary_takes_each_seeds_best_and_the_mean_best_so_far():
    found = {"tpe": {0: [0.2, 0.5, 0.4], 1: [0.6, 0.1, 0.7]}, "random": {0: [0.3, 0.3, 0.3]}}
    summary = sweep_engines.summarize(found)
    assert summary["tpe"]["best_per_seed"] == [0.5, 0.7]
    assert summary["tpe"]["mean_best"] == pytest.approx(0.6)
    assert summary["tpe"]["mean_best_so_far"] == pytest.approx([0.4, 0.55, 0.6])
    meta = {"budget": 3, "seeds": [0, 1], "steps": 5, "machine": "x86_64 CPU", "wall_s": 1.0}
    text = sweep_engines.table(summary, meta)
    assert "| tpe | 0.600 | 0.600 | 0.500, 0.700 | 0.400 0.550 0.600 |" in text
