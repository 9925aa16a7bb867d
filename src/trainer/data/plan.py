"""A run's data: where it lives (`plan_data`: decoded once into uint8 tensors on the training
device when the set fits `data.in_memory_max_mb`, else streamed by DataLoader workers) and its
training and validation batches (`build_data`), normalised and augmented on the device."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from trainer.config.schema import ConfigError, DataConfig
from trainer.data.augment import GEOMETRY, Augment
from trainer.data.batches import Batches, BatchTransform, ResidentBatches, StreamedBatches
from trainer.data.stored import StoredFormat, count_samples, load, stats, stored_format
from trainer.hardware import threads

log = logging.getLogger(__name__)
CPU = torch.device("cpu")


@dataclass(frozen=True)
class DataPlan:
    """Where a data set lives and who decodes it; decided from the config and a file count."""

    pipeline: str  # memory (uint8 tensors on the training device) | stream (DataLoader)
    workers: int  # DataLoader workers of a streamed set (0 for a resident one)
    decode_workers: int  # processes that decode an image folder once, for pipeline=memory
    stored_format: StoredFormat
    stored_mb: float  # decoded uint8 size of both splits


def plan_data(cfg: DataConfig, channels: int | None, size: int | None) -> DataPlan:
    """`data.pipeline=auto` keeps a set in memory when its decoded size fits
    `data.in_memory_max_mb`; `data.num_workers=auto` is this rank's CPU share minus one (at
    most 8) for a streamed set. Cheap: nothing is decoded."""
    target = stored_format(cfg, channels, size)
    mb = count_samples(cfg) * target.sample_bytes / 2**20
    pipeline = cfg.pipeline
    if pipeline == "auto":
        pipeline = "memory" if mb <= cfg.in_memory_max_mb else "stream"
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's ranks on this node
    if cfg.num_workers == "auto":
        workers = threads.auto_workers(local_world)
    else:
        workers = threads.cap_workers(int(cfg.num_workers))
    memory = pipeline == "memory"
    return DataPlan(pipeline, 0 if memory else workers, workers if memory else 0, target, mb)


@dataclass
class DataBundle:
    train: Batches
    val: Batches
    num_classes: int
    sample_shape: tuple[int, int, int]  # C, H, W of one model input
    train_batch_size: int  # samples per optimizer step over all ranks
    eval_batch_size: int  # samples per evaluation batch of this rank (the padded shape)
    info: dict[str, Any] = field(default_factory=dict)  # the `data` section of summary.json

    def set_epoch(self, epoch: int) -> None:
        """Shuffle for `epoch`: the order depends only on (seed, epoch), never on the ranks."""
        self.train.set_epoch(epoch)

    def set_memory_format(self, memory_format: torch.memory_format) -> None:
        """Hand the model its inputs in its own memory format (channels_last)."""
        self.train.transform.memory_format = memory_format
        self.val.transform.memory_format = memory_format


def _batch_sizes(cfg: DataConfig, n_train: int, world_size: int) -> tuple[int, int]:
    eval_bs = cfg.eval_batch_size or cfg.batch_size
    # Full batches only: a smaller last batch would make Dynamo compile a second graph.
    # When the whole set is smaller than one batch, use it as the batch instead.
    train_bs = min(cfg.batch_size, n_train)
    for key, value in (("data.batch_size", train_bs), ("data.eval_batch_size", eval_bs)):
        if value % world_size:
            raise ConfigError(
                f"{key}={value} is the batch over all {world_size} ranks and must be divisible "
                f"by their number; set {key} to a multiple of {world_size}."
            )
    return train_bs, eval_bs


def _augment(cfg: DataConfig, seed: int, device: torch.device, rank: int, world: int):
    if cfg.augment == "none" or (cfg.augment == "standard" and GEOMETRY[cfg.name] == "none"):
        if cfg.augment == "standard":
            log.info("data.augment=standard: %s has no standard augmentation", cfg.name)
        return None
    return Augment(cfg.name, cfg.augment, seed=seed, device=device, rank=rank, world_size=world)


@dataclass(frozen=True)
class Placement:
    """Where a rank's batches go: the device, this rank among `world_size` (each takes its share
    of every global batch), and whether streamed batches are read into pinned memory (CUDA)."""

    device: torch.device = CPU
    rank: int = 0
    world_size: int = 1
    pin_memory: bool = False


def build_data(
    cfg: DataConfig,
    *,
    channels: int | None,
    size: int | None,
    seed: int,
    placement: Placement = Placement(),
    plan: DataPlan | None = None,
) -> DataBundle:
    """Training and validation batches whose samples have `channels` and `size` (None: native),
    on `placement.device`.

    With several ranks, global training batch k holds the same samples as in a one-rank run
    (rank r takes every world_size-th of them), and the validation set is split so that each
    sample is evaluated by exactly one rank.
    """
    device, rank, world_size = placement.device, placement.rank, placement.world_size
    plan = plan or plan_data(cfg, channels=channels, size=size)
    splits = load(
        cfg, plan.stored_format, in_memory=plan.pipeline == "memory", workers=plan.decode_workers
    )
    train_set, val_set = splits.train, splits.val
    if len(train_set) == 0 or len(val_set) == 0:  # type: ignore[arg-type]
        raise ConfigError(
            f"data={cfg.name} yields {len(train_set)} training and {len(val_set)} validation "  # type: ignore[arg-type]
            "samples; both splits need at least one (check data.root or data.val_fraction)."
        )
    train_bs, eval_bs = _batch_sizes(cfg, len(train_set), world_size)  # type: ignore[arg-type]
    resident = train_set.tensors[0] if isinstance(train_set, TensorDataset) else None
    mean, std = stats(cfg, plan.stored_format, resident)
    augment = _augment(cfg, seed, device, rank, world_size)
    transforms = (
        BatchTransform(mean, std, plan.stored_format.channels, augment),
        BatchTransform(mean, std, plan.stored_format.channels),
    )
    # Shuffled with seed + epoch (see DataBundle.set_epoch); one rank reads the whole order.
    n_train = len(train_set)  # type: ignore[arg-type]
    sampler = DistributedSampler(
        range(n_train), world_size, rank, shuffle=True, seed=seed * 1_000_003, drop_last=True
    )
    sizes = (train_bs // world_size, eval_bs // world_size)
    share = (rank, world_size)
    if plan.pipeline == "memory":
        train, val = _resident(train_set, val_set, sampler, sizes, transforms, device, share)
    else:
        parts = (train_set, val_set, sampler, sizes, transforms)
        train, val = _streamed(*parts, placement, workers=plan.workers)
    shape = (plan.stored_format.channels, plan.stored_format.height, plan.stored_format.width)
    info = _info(cfg, plan, device, augment)
    return DataBundle(train, val, splits.num_classes, shape, train_bs, sizes[1], info)


def _info(cfg: DataConfig, plan: DataPlan, device: torch.device, augment: Augment | None):
    """The `data` section of summary.json."""
    return {
        "name": cfg.name,
        "pipeline": plan.pipeline,
        "stored_on": str(device) if plan.pipeline == "memory" else "host (DataLoader)",
        "stored_mb": round(plan.stored_mb, 1),
        "stored_shape": [
            plan.stored_format.stored,
            plan.stored_format.height,
            plan.stored_format.width,
        ],
        "num_workers": plan.workers,
        "augment": cfg.augment,
        "augment_ops": augment.ops if augment is not None else [],
    }


def _resident(train_set, val_set, sampler, sizes, transforms, device, share):
    """Both splits' tensors moved to `device` once; validation: this rank's share."""
    rank, world = share
    images, labels = (t.to(device) for t in train_set.tensors)
    val_images, val_labels = (t[rank::world].to(device) for t in val_set.tensors)
    train = ResidentBatches(
        images, labels, batch_size=sizes[0], transform=transforms[0], sampler=sampler
    )
    val = ResidentBatches(val_images, val_labels, batch_size=sizes[1], transform=transforms[1])
    return train, val


def _streamed(train_set, val_set, sampler, sizes, transforms, placement: Placement, *, workers):
    """DataLoaders of uint8 samples (decoded in `workers` processes) feeding the device."""
    rank, world, device = placement.rank, placement.world_size, placement.device
    pin = placement.pin_memory and device.type == "cuda"
    workers = {"num_workers": workers, "persistent_workers": workers > 0}
    loader = DataLoader(
        train_set, batch_size=sizes[0], sampler=sampler, drop_last=True, pin_memory=pin, **workers
    )
    if world > 1:
        val_set = Subset(val_set, range(rank, len(val_set), world))
    val_loader = DataLoader(val_set, batch_size=sizes[1], shuffle=False, pin_memory=pin, **workers)
    train = StreamedBatches(loader, device=device, transform=transforms[0], train=True)
    val = StreamedBatches(val_loader, device=device, transform=transforms[1], train=False)
    return train, val
