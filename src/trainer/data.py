"""Data sets and loaders; inputs are adapted here (channels, size, normalisation) so models
stay unmodified torchvision builds."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from trainer import threads
from trainer.config import ConfigError, DataConfig

log = logging.getLogger(__name__)

# Per-data-set normalisation constants (mean, std per channel) of the training split.
_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "imagefolder": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
_TORCHVISION = {"cifar10": "CIFAR10", "mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
_FOLDERS = {
    "cifar10": "cifar-10-batches-py/",
    "mnist": "MNIST/raw/",
    "fashion_mnist": "FashionMNIST/raw/",
}


@dataclass
class DataBundle:
    train: DataLoader
    val: DataLoader
    num_classes: int
    sample_shape: tuple[int, int, int]  # C, H, W of one model input
    train_batch_size: int  # samples per optimizer step over all ranks
    eval_batch_size: int  # samples per evaluation batch of this rank (the padded shape)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle for `epoch`: the order depends only on (seed, epoch), never on the ranks."""
        self.train.sampler.set_epoch(epoch)  # type: ignore[union-attr]


def build_data(
    cfg: DataConfig,
    *,
    channels: int | None,
    size: int | None,
    seed: int,
    pin_memory: bool,
    rank: int = 0,
    world_size: int = 1,
) -> DataBundle:
    """Build train/val loaders whose samples have `channels` and `size` (None: native).

    With several ranks, global training batch k holds the same samples as in a one-rank run
    (rank r takes every world_size-th of them), and the validation set is split so that each
    sample is evaluated by exactly one rank.
    """
    if cfg.name in ("digits", "fake"):
        train_set, val_set, num_classes = _in_memory(cfg, channels, size)
    elif cfg.name in _TORCHVISION:
        train_set, val_set, num_classes = _torchvision_set(cfg, channels, size)
    else:
        train_set, val_set, num_classes = _image_folder(cfg, channels, size)
    if len(train_set) == 0 or len(val_set) == 0:
        raise ConfigError(
            f"data={cfg.name} yields {len(train_set)} training and {len(val_set)} validation "
            "samples; both splits need at least one (check data.root or data.val_fraction)."
        )
    sample_shape = tuple(train_set[0][0].shape)
    eval_bs = cfg.eval_batch_size or cfg.batch_size
    # Full batches only: a smaller last batch would make Dynamo compile a second graph.
    # When the whole set is smaller than one batch, use it as the batch instead.
    train_bs = min(cfg.batch_size, len(train_set))
    for key, value in (("data.batch_size", train_bs), ("data.eval_batch_size", eval_bs)):
        if value % world_size:
            raise ConfigError(
                f"{key}={value} is the batch over all {world_size} ranks and must be divisible "
                f"by their number; set {key} to a multiple of {world_size}."
            )
    num_workers = threads.cap_workers(cfg.num_workers)  # fits this run's CPU share
    workers = {"num_workers": num_workers, "persistent_workers": num_workers > 0}
    # Shuffled with seed + epoch (see DataBundle.set_epoch); one rank reads the whole order.
    sampler = DistributedSampler(
        train_set, world_size, rank, shuffle=True, seed=seed * 1_000_003, drop_last=True
    )
    train = DataLoader(
        train_set,
        batch_size=train_bs // world_size,
        sampler=sampler,
        drop_last=True,
        pin_memory=pin_memory,
        **workers,
    )
    if world_size > 1:
        val_set = Subset(val_set, range(rank, len(val_set), world_size))
    rank_eval_bs = eval_bs // world_size
    val = DataLoader(
        val_set, batch_size=rank_eval_bs, shuffle=False, pin_memory=pin_memory, **workers
    )
    return DataBundle(train, val, num_classes, sample_shape, train_bs, rank_eval_bs)  # type: ignore[arg-type]


def _adapt(x: torch.Tensor, channels: int | None, size: int | None) -> torch.Tensor:
    """Convert a float batch N×C×H×W to the requested channels and square size."""
    if channels is not None and x.shape[1] != channels:
        if x.shape[1] == 1:
            x = x.expand(-1, channels, -1, -1)
        elif channels == 1:
            x = x.mean(dim=1, keepdim=True)
        else:
            raise ConfigError(
                f"model.in_channels={channels} cannot be made from {x.shape[1]}-channel images; "
                "use model.in_channels=null, 1 or 3."
            )
    if size is not None and tuple(x.shape[-2:]) != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.contiguous()


def _standardise(train: torch.Tensor, val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return (train - mean) / std, (val - mean) / std


def _in_memory(cfg: DataConfig, channels: int | None, size: int | None):
    if cfg.name == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(digits.target, dtype=torch.long)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(cfg.split_seed))
        n_val = max(1, round(len(labels) * cfg.val_fraction))
        val_idx, train_idx = order[:n_val], order[n_val:]
        x_train, y_train = images[train_idx], labels[train_idx]
        x_val, y_val = images[val_idx], labels[val_idx]
        num_classes = 10
    else:
        from torchvision.datasets import FakeData
        from torchvision.transforms.functional import pil_to_tensor

        shape = tuple(int(s) for s in cfg.image_shape)

        def materialise(n: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
            fake = FakeData(n, shape, cfg.num_classes, random_offset=offset)
            xs, ys = zip(*(fake[i] for i in range(n)), strict=True)
            x = torch.stack([pil_to_tensor(img) for img in xs]).float() / 255.0
            return x, torch.tensor(ys, dtype=torch.long)

        x_train, y_train = materialise(cfg.num_samples, cfg.split_seed * 1_000_003)
        x_val, y_val = materialise(
            max(1, cfg.num_samples // 4), cfg.split_seed * 1_000_003 + cfg.num_samples
        )
        num_classes = cfg.num_classes
    x_train, x_val = _standardise(_adapt(x_train, channels, size), _adapt(x_val, channels, size))
    return TensorDataset(x_train, y_train), TensorDataset(x_val, y_val), num_classes


def _transform(name: str, native_channels: int, channels: int | None, size: int | None):
    from torchvision import transforms as T

    steps: list = []
    if size is not None:
        steps.append(T.Resize((size, size), antialias=True))
    out_channels = channels or native_channels
    if out_channels != native_channels:
        steps.append(T.Grayscale(num_output_channels=out_channels))
    steps.append(T.ToTensor())
    mean, std = _STATS[name]
    if len(mean) != out_channels:  # grey statistics for RGB input and vice versa
        mean, std = (sum(mean) / len(mean),) * out_channels, (sum(std) / len(std),) * out_channels
    steps.append(T.Normalize(mean, std))
    return T.Compose(steps)


def _require_root(cfg: DataConfig) -> Path:
    if not cfg.root:
        raise ConfigError(f"data={cfg.name} needs a folder: set data.root=/path/to/data.")
    root = Path(cfg.root).expanduser()
    if not root.exists() and not cfg.download:
        raise ConfigError(
            f"data.root={cfg.root} does not exist. Point data.root at the folder that holds the "
            f"{cfg.name} data set"
            + (
                ", or add data.download=true to fetch it there (needs network)."
                if cfg.name in _TORCHVISION
                else "."
            )
        )
    return root


def _torchvision_set(cfg: DataConfig, channels: int | None, size: int | None):
    import torchvision.datasets as D

    root = _require_root(cfg)
    cls = getattr(D, _TORCHVISION[cfg.name])
    native = 3 if cfg.name == "cifar10" else 1
    transform = _transform(cfg.name, native, channels, size)
    try:
        train = cls(str(root), train=True, transform=transform, download=cfg.download)
        val = cls(str(root), train=False, transform=transform, download=cfg.download)
    except RuntimeError as err:
        raise ConfigError(
            f"data.root={cfg.root} holds no {cfg.name} data set ({err}). Put the extracted "
            f"files under {root / _FOLDERS[cfg.name]} (torchvision's layout), or add "
            "data.download=true to fetch them (needs network)."
        ) from None
    return train, val, len(train.classes)


def _image_folder(cfg: DataConfig, channels: int | None, size: int | None):
    from torchvision.datasets import ImageFolder

    root = _require_root(cfg)
    transform = _transform("imagefolder", 3, channels or 3, size or 224)
    try:
        if (root / "train").is_dir() and (root / "val").is_dir():
            train: Dataset = ImageFolder(str(root / "train"), transform=transform)
            val: Dataset = ImageFolder(str(root / "val"), transform=transform)
            classes = train.classes  # type: ignore[attr-defined]
        else:
            full = ImageFolder(str(root), transform=transform)
            order = torch.randperm(
                len(full), generator=torch.Generator().manual_seed(cfg.split_seed)
            )
            n_val = max(1, round(len(full) * cfg.val_fraction))
            val, train = Subset(full, order[:n_val].tolist()), Subset(full, order[n_val:].tolist())
            classes = full.classes
    except (FileNotFoundError, RuntimeError) as err:
        raise ConfigError(
            f"data.root={cfg.root} is not an image folder ({err}). Lay it out as "
            "root/<class>/<image> or root/train/<class>/... and root/val/<class>/...."
        ) from None
    return train, val, len(classes)
