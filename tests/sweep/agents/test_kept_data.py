"""A trial template keeps the in-memory set a trial's config names, and a forked trial's load
returns it instead of loading again; other sets, other formats and streamed sets load as
before, and the template's torch keeps its thread count."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_cfg
from trainer.config.schema import DataConfig
from trainer.data import stored
from trainer.data.plan import plan_data
from trainer.sweep.agents import kept_data
from trainer.train.models import input_spec


@pytest.fixture
def nothing_kept(monkeypatch):
    monkeypatch.setattr(stored, "_kept", None)
    return stored


def test_a_kept_set_is_what_the_trials_load(nothing_kept):
    threads = torch.get_num_threads()
    kept_data.keep(make_cfg("data=digits", "model=small_cnn"))
    assert torch.get_num_threads() == threads
    key, splits = stored._kept
    plan = plan_data(DataConfig(name="digits"), *input_spec(make_cfg("model=small_cnn").model))
    again = stored.load(DataConfig(name="digits"), plan.stored_format, in_memory=True, workers=0)
    assert again is splits
    other = DataConfig(name="digits", val_fraction=0.5)  # another split: loaded, not kept
    assert stored.load(other, plan.stored_format, in_memory=True, workers=0) is not splits


def test_a_folder_or_streamed_set_or_a_bad_config_is_not_kept(nothing_kept, tmp_path):
    folder = DataConfig(name="imagefolder", root=str(tmp_path))  # its files may change
    stored.keep(folder, plan_data(folder, 3, 32).stored_format, workers=0)
    kept_data.keep(make_cfg("data=fake", "data.pipeline=stream"))
    kept_data.keep(make_cfg("data=digits", "data.batch_size=many"))  # fails its checks
    assert stored._kept is None
    kept_data.keep(make_cfg("data=fake"))
    assert stored._kept is not None
