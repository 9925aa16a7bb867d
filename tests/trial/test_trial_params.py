"""The parameter file W&B's agent gives a trial (WANDB_SWEEP_PARAM_PATH): written as `wandb agent`
writes it, read back by the trial with the exact values."""

from __future__ import annotations

from wandb.sdk.lib import config_util

from trainer.trial import trial_params


def test_the_agents_parameter_file_reads_back_the_exact_values(tmp_path, monkeypatch):
    params = {"optimizer.lr": 1e-05, "model": "small_cnn", "s": "a,b", "n": None, "l": [1, 2]}
    path = tmp_path / "params.yaml"
    config_util.save_config_file_from_dict(str(path), {k: {"value": v} for k, v in params.items()})
    assert trial_params.sweep_param_values(str(path)) == params  # wandb_version header dropped
    monkeypatch.setenv(trial_params.PARAM_PATH_ENV, str(path))
    assert trial_params.param_path() == str(path)
    monkeypatch.setenv(trial_params.PARAM_PATH_ENV, str(tmp_path / "missing.yaml"))
    assert trial_params.param_path() is None
    monkeypatch.delenv(trial_params.PARAM_PATH_ENV)
    assert trial_params.param_path() is None
