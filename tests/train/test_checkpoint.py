"""Checkpoints: the payload both ways (every part of the train state, RNG states as plain values), old checkpoints."""

from __future__ import annotations

import logging
import pickle
import random

import numpy as np
import pytest
import torch

from tests.train.test_step import _loader, _train_objects
from trainer.config.schema import ConfigError, SchedulerConfig
from trainer.outputs.layout import RunLayout
from trainer.train import checkpoint as ckpt
from trainer.train.optim import build_scheduler
from trainer.train.step import EpochControl, GracefulStop, Progress, StepRules, train_epoch

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_rng_state_round_trips_as_plain_values(tmp_path):
    torch.save(ckpt.rng_state(), tmp_path / "rng.pt")
    state = torch.load(tmp_path / "rng.pt", weights_only=True)
    draws = (random.random(), float(np.random.rand()), float(torch.rand(())))
    ckpt.set_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == draws


def _state(seed=0):
    model, optimizer, scaler = _train_objects(seed)
    scheduler = build_scheduler(SchedulerConfig(name="cosine"), optimizer, max_epochs=3)
    return ckpt.TrainState(
        model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
        progress=Progress(), model_name="small_cnn", num_classes=3, sample_shape=(1, 8, 8),
        config={"trainer": {"seed": seed}},
    )  # fmt: skip


@pytest.mark.slow
def test_train_state_saves_and_restores_every_part(tmp_path):
    saved = _state(0)
    train_epoch(
        saved.model, _loader(), saved.optimizer, saved.scaler, progress=saved.progress,
        rules=StepRules(CPU),
        control=EpochControl(max_steps=None, stop=GracefulStop(), time_first_step=False),
    )  # fmt: skip
    saved.scheduler.step()
    saved.progress.epoch, saved.progress.best = 1, 0.5
    path = RunLayout(tmp_path).last
    saved.save(path)
    payload = torch.load(path)  # torch's default: weights_only=True
    assert payload["format_version"] == ckpt.FORMAT_VERSION and payload["num_classes"] == 3
    expected = random.random()
    restored = _state(1)
    restored.restore(path)
    assert random.random() == expected  # the RNG continues where the saved run stood
    assert restored.progress.epoch == 1 and restored.progress.step == saved.progress.step
    for a, b in zip(saved.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert restored.scheduler.last_epoch == 1
    assert (
        restored.optimizer.state_dict()["state"].keys()
        == saved.optimizer.state_dict()["state"].keys()
    )


def _legacy_checkpoint(path, state):
    """A checkpoint as the previous release wrote it: numpy's RNG state pickled."""
    payload = state.payload()
    payload["rng"] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    torch.save({"format_version": 1, **payload}, path)


def test_old_checkpoints_resume_with_a_warning_but_nowhere_else(tmp_path, caplog):
    path = tmp_path / "old.pt"
    _legacy_checkpoint(path, _state())
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    with caplog.at_level(logging.WARNING, logger="trainer.train.checkpoint"):
        _state(1).restore(path)
    assert "older release" in caplog.text and "weights_only=False" in caplog.text
    with pytest.raises(ConfigError, match=r"checkpoint=.*older release.*trainer.resume="):
        ckpt.load(path, key="checkpoint")
