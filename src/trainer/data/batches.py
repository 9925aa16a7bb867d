"""Batches on the training device: uint8 images gathered from a device-resident tensor (or
streamed through a DataLoader and copied over), then normalised, and for training augmented,
there. Both kinds iterate the same (seed, epoch) order, resumable mid-epoch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision.transforms.v2 import functional as TF

from trainer.data.augment import Augment

Batch = tuple[torch.Tensor, torch.Tensor]


class BatchTransform:
    """uint8 N×C×H×W on the device → float model inputs: RandAugment (strong), scale to [0, 1],
    the geometric policy, grey → RGB where the model wants it, normalise, erasing (strong),
    then the model's memory format. Evaluation batches are never augmented."""

    def __init__(
        self, mean: tuple, std: tuple, channels: int, augment: Augment | None = None
    ) -> None:
        self.mean, self.std, self.channels = list(mean), list(std), channels
        self.augment = augment
        self.memory_format = torch.contiguous_format  # channels_last when the model is
        self._constants: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std per channel, with the constants copied to the device once (v2's
        normalize copies them every call, a host-device sync per batch on a GPU)."""
        if x.device not in self._constants:
            shape = (1, -1, 1, 1)
            mean = torch.tensor(self.mean, device=x.device).view(shape)
            self._constants[x.device] = (mean, torch.tensor(self.std, device=x.device).view(shape))
        mean, std = self._constants[x.device]
        return x.sub(mean).div_(std)

    def __call__(self, x: torch.Tensor, *, train: bool) -> torch.Tensor:
        aug = self.augment if train else None
        draw = aug.draw(x.shape[0]) if aug is not None else None
        if aug is not None:
            x = aug.on_uint8(x, draw)
        x = TF.to_dtype(x, torch.float32, scale=True)
        if aug is not None:
            x = aug.on_float(x, draw)
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1)
        x = self._normalise(x)
        if aug is not None:
            x = aug.on_normalised(x, draw)
        return x.contiguous(memory_format=self.memory_format)


class Batches(ABC):
    """What the loops iterate: `len()` batches per epoch; `iterate(skip)` starts a resumed epoch
    after the batches it already trained on without producing (or augmenting) them."""

    train: bool
    transform: BatchTransform

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def set_epoch(self, epoch: int) -> None: ...

    @abstractmethod
    def iterate(self, skip: int = 0, *, augment: bool = True) -> Iterator[Batch]: ...

    def __iter__(self) -> Iterator[Batch]:
        return self.iterate(0)

    def plain(self) -> _Plain:
        """The same batches, never augmented and drawing from no augmentation generator: what
        compile=auto and the compile checks look at, leaving training's random stream as is."""
        return _Plain(self)

    @property
    @abstractmethod
    def num_samples(self) -> int: ...


class _Plain:
    def __init__(self, batches: Batches) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[Batch]:
        return self.batches.iterate(0, augment=False)


class ResidentBatches(Batches):
    """Batches gathered from uint8 images and labels kept on the training device. Training
    order: this rank's share of a DistributedSampler's (seed, epoch) permutation, exactly what
    a DataLoader over it would give; evaluation: in order, the last batch smaller."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int,
        transform: BatchTransform, sampler: DistributedSampler | None = None,
    ) -> None:  # fmt: skip
        self.images, self.labels = images, labels
        self.batch_size, self.transform, self.sampler = batch_size, transform, sampler
        self.train = sampler is not None

    def __len__(self) -> int:
        if self.sampler is not None:  # full batches only
            return len(self.sampler) // self.batch_size
        return -(-len(self.labels) // self.batch_size)

    @property
    def num_samples(self) -> int:
        return len(self.labels)

    def set_epoch(self, epoch: int) -> None:
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)

    def _order(self) -> torch.Tensor | None:
        if self.sampler is None:
            return None
        return torch.tensor(list(self.sampler), dtype=torch.long).to(self.images.device)

    def iterate(self, skip: int = 0, *, augment: bool = True) -> Iterator[Batch]:
        order, b = self._order(), self.batch_size  # one host-to-device copy per epoch
        for k in range(skip, len(self)):
            if order is None:
                x, y = self.images[k * b : (k + 1) * b], self.labels[k * b : (k + 1) * b]
            else:
                index = order[k * b : (k + 1) * b]
                x, y = self.images.index_select(0, index), self.labels.index_select(0, index)
            yield self.transform(x, train=self.train and augment), y


class StreamedBatches(Batches):
    """A DataLoader of uint8 images (decoded per sample in its workers); each batch is copied
    to the device and transformed there like a resident one."""

    def __init__(
        self, loader: DataLoader, *, device: torch.device, transform: BatchTransform, train: bool
    ) -> None:
        self.loader, self.device, self.transform, self.train = loader, device, transform, train

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def num_samples(self) -> int:
        return len(self.loader.dataset)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        sampler: Any = self.loader.sampler
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)

    def iterate(self, skip: int = 0, *, augment: bool = True) -> Iterator[Batch]:
        for k, (x, y) in enumerate(self.loader):
            if k < skip:  # loaded, not transformed: the augmentation stream stays where it was
                continue
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            yield self.transform(x, train=self.train and augment), y
