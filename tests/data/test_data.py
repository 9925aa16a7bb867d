"""Data: full, seeded batches and the split of the global batch over ranks."""

from __future__ import annotations

import pytest
import torch

from trainer.config.schema import ConfigError, DataConfig
from trainer.data.plan import Placement, build_data

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_digits_loaders_have_full_batches_and_seeded_order():
    cfg = DataConfig(name="digits", batch_size=100)
    data = build_data(cfg, channels=3, size=16, seed=0)
    assert data.sample_shape == (3, 16, 16) and data.num_classes == 10
    assert all(y.shape[0] == 100 for _, y in data.train)  # no smaller last batch
    assert sum(y.shape[0] for _, y in data.val) == round(1797 * cfg.val_fraction)
    data.set_epoch(1)
    first = next(iter(data.train))[1]
    again = build_data(cfg, channels=3, size=16, seed=0)
    again.set_epoch(1)
    assert torch.equal(next(iter(again.train))[1], first)
    again.set_epoch(2)
    assert not torch.equal(next(iter(again.train))[1], first)


def test_ranks_split_the_global_batch():
    cfg = DataConfig(name="fake", batch_size=8, num_samples=64, image_shape=[1, 4, 4])
    one = build_data(cfg, channels=None, size=None, seed=0)
    two = [
        build_data(cfg, channels=None, size=None, seed=0, placement=Placement(rank=r, world_size=2))
        for r in (0, 1)
    ]
    global_batch = next(iter(one.train))[1]
    parts = [next(iter(d.train))[1] for d in two]
    assert sorted(torch.cat(parts).tolist()) == sorted(global_batch.tolist())
    with pytest.raises(ConfigError, match="data.batch_size=7"):
        build_data(
            DataConfig(name="fake", batch_size=7),
            channels=None,
            size=None,
            seed=0,
            placement=Placement(rank=0, world_size=2),
        )
