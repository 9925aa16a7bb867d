"""Every data set as uint8 images of the stored layout (the model's size; grey kept grey): decoded
once into tensors, or a Dataset that decodes per sample for streaming. Normalisation constants
come with them; nothing here is on the training device yet."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision.datasets as D
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF
from torchvision.transforms.v2.functional import pil_to_tensor

from trainer.config.schema import ConfigError, DataConfig

# Native (channels, height, width) and sample count (train + test) of the fixed-size sets.
NATIVE = {
    "digits": ((1, 8, 8), 1797),
    "mnist": ((1, 28, 28), 70_000),
    "fashion_mnist": ((1, 28, 28), 70_000),
    "cifar10": ((3, 32, 32), 60_000),
}
FOLDER_SIZE = 224  # imagefolder: square size without model.image_size
# Per-data-set normalisation constants (mean, std per channel) of the training split.
STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "imagefolder": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
TORCHVISION = {"cifar10": "CIFAR10", "mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
_FOLDERS = {
    "cifar10": "cifar-10-batches-py/",
    "mnist": "MNIST/raw/",
    "fashion_mnist": "FashionMNIST/raw/",
}


@dataclass(frozen=True)
class StoredFormat:
    """How images are stored: `stored` channels (grey stays grey; the model's 3 channels are made
    per batch), the model's `channels`, and the stored (= model input) size."""

    native: int  # channels of the files
    stored: int
    channels: int
    height: int
    width: int

    @property
    def sample_bytes(self) -> int:
        return self.stored * self.height * self.width


def stored_format(cfg: DataConfig, channels: int | None, size: int | None) -> StoredFormat:
    """The stored layout of `cfg` for a model wanting `channels` and square `size` (None: native)."""
    if cfg.name == "fake":
        native, height, width = (int(s) for s in cfg.image_shape)
    elif cfg.name == "imagefolder":
        native, height, width = 3, FOLDER_SIZE, FOLDER_SIZE
    else:
        native, height, width = NATIVE[cfg.name][0]
    want = channels or native
    if want != native and 1 not in (want, native):
        raise ConfigError(
            f"model.in_channels={channels} cannot be made from {native}-channel images; use "
            "model.in_channels=null, 1 or 3."
        )
    height, width = (size, size) if size is not None else (height, width)
    return StoredFormat(native, 1 if native == 1 else want, want, height, width)


def count_samples(cfg: DataConfig) -> int:
    """Training plus validation images, without decoding any (an image folder is listed)."""
    if cfg.name == "fake":
        return cfg.num_samples + max(1, cfg.num_samples // 4)
    if cfg.name != "imagefolder":
        return NATIVE[cfg.name][1]

    root = require_root(cfg)
    return sum(
        name.lower().endswith(IMG_EXTENSIONS) for _, _, names in os.walk(root) for name in names
    )


class Reformat:
    """uint8 C×H×W (or N×C×H×W) → the stored layout: grey from RGB, resized with antialiasing."""

    def __init__(self, target: StoredFormat) -> None:
        self.target = target

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        t = self.target
        if images.shape[-3] == 3 and t.stored == 1:
            images = TF.rgb_to_grayscale(images)
        if tuple(images.shape[-2:]) != (t.height, t.width):
            images = TF.resize(images, [t.height, t.width], antialias=True)
        return images.contiguous()


def reformat_all(images: torch.Tensor, target: StoredFormat, chunk: int = 4096) -> torch.Tensor:
    """`Reformat` over a whole N×C×H×W uint8 tensor, a chunk at a time (bounded extra memory)."""
    reformat = Reformat(target)
    return torch.cat([reformat(images[i : i + chunk]) for i in range(0, len(images), chunk)])


def stats(cfg: DataConfig, target: StoredFormat, train: torch.Tensor | None) -> tuple[tuple, tuple]:
    """(mean, std) per model channel, in units of pixel / 255: the published constants of a
    named set (grey ones averaged when channels change), else measured on `train`."""
    if cfg.name in STATS:
        mean, std = STATS[cfg.name]
        if len(mean) != target.channels:
            mean = (sum(mean) / len(mean),) * target.channels
            std = (sum(std) / len(std),) * target.channels
        return mean, std
    assert train is not None
    x = train.float().div_(255.0)
    mean = x.mean(dim=(0, 2, 3)).tolist()
    std = x.std(dim=(0, 2, 3)).clamp_min(1e-6).tolist()
    if len(mean) != target.channels:  # grey stored, RGB wanted: the same per channel
        mean, std = mean * target.channels, std * target.channels
    return tuple(mean), tuple(std)


def require_root(cfg: DataConfig) -> Path:
    if not cfg.root:
        raise ConfigError(f"data={cfg.name} needs a folder: set data.root=/path/to/data.")
    root = Path(cfg.root).expanduser()
    if not root.exists() and not cfg.download:
        how = (
            ", or add data.download=true to fetch it there (needs network)."
            if cfg.name in TORCHVISION
            else "."
        )
        raise ConfigError(
            f"data.root={cfg.root} does not exist. Point data.root at the folder that holds the "
            f"{cfg.name} data set{how}"
        )
    return root


def torchvision_pair(cfg: DataConfig, transform: Any = None) -> tuple[Any, Any]:
    """torchvision's train and test sets of `cfg` (a clear error when the files are missing)."""
    root = require_root(cfg)
    cls = getattr(D, TORCHVISION[cfg.name])
    try:
        train = cls(str(root), train=True, transform=transform, download=cfg.download)
        val = cls(str(root), train=False, transform=transform, download=cfg.download)
    except RuntimeError as err:
        raise ConfigError(
            f"data.root={cfg.root} holds no {cfg.name} data set ({err}). Put the extracted "
            f"files under {root / _FOLDERS[cfg.name]} (torchvision's layout), or add "
            "data.download=true to fetch them (needs network)."
        ) from None
    return train, val


def read_rgb(path: str) -> torch.Tensor:
    """An image file as uint8 RGB C×H×W: torchvision's decoder, PIL for formats it lacks."""
    try:
        return decode_image(path, mode=ImageReadMode.RGB)
    except RuntimeError:
        with Image.open(path) as image:
            return pil_to_tensor(image.convert("RGB"))


def folder_pair(cfg: DataConfig, target: StoredFormat) -> tuple[Dataset, Dataset, int]:
    """An image folder's train and validation sets (root/train + root/val, or a seeded split
    of root) yielding uint8 images of the stored layout."""
    root, reformat = require_root(cfg), Reformat(target)
    try:
        if (root / "train").is_dir() and (root / "val").is_dir():
            train = ImageFolder(str(root / "train"), transform=reformat, loader=read_rgb)
            val = ImageFolder(str(root / "val"), transform=reformat, loader=read_rgb)
            return train, val, len(train.classes)
        full = ImageFolder(str(root), transform=reformat, loader=read_rgb)
    except (FileNotFoundError, RuntimeError) as err:
        raise ConfigError(
            f"data.root={cfg.root} is not an image folder ({err}). Lay it out as "
            "root/<class>/<image> or root/train/<class>/... and root/val/<class>/...."
        ) from None
    order = torch.randperm(len(full), generator=torch.Generator().manual_seed(cfg.split_seed))
    n_val = max(1, round(len(full) * cfg.val_fraction))
    val_set, train_set = Subset(full, order[:n_val].tolist()), Subset(full, order[n_val:].tolist())
    return train_set, val_set, len(full.classes)


def as_tensors(dataset: Dataset, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode every sample of `dataset` once (in `workers` processes) into two tensors."""
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[0], dataset.tensors[1]
    if len(dataset) == 0:  # type: ignore[arg-type]  # build_data says which split is empty
        return torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.long)

    loader = DataLoader(dataset, batch_size=256, num_workers=workers)
    xs, ys = zip(*loader, strict=True)
    return torch.cat(xs), torch.cat(ys).long()


@dataclass
class Splits:
    """Training and validation sets yielding (uint8 image, label): TensorDatasets when decoded
    into memory, per-sample decoding Datasets when streamed."""

    train: Dataset
    val: Dataset
    num_classes: int


def _split(
    images: torch.Tensor, labels: torch.Tensor, cfg: DataConfig, target: StoredFormat
) -> Splits:
    """A seeded train/validation split (data.split_seed, data.val_fraction) of one tensor set."""
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(cfg.split_seed))
    n_val = max(1, round(len(labels) * cfg.val_fraction))
    images = reformat_all(images, target)
    return Splits(
        TensorDataset(images[order[n_val:]], labels[order[n_val:]]),
        TensorDataset(images[order[:n_val]], labels[order[:n_val]]),
        10,
    )


def _fake(cfg: DataConfig, target: StoredFormat) -> Splits:
    """Random uint8 images and labels, reproducible from data.split_seed."""
    g = torch.Generator().manual_seed(cfg.split_seed * 1_000_003)
    shape = tuple(int(s) for s in cfg.image_shape)

    def draw(n: int) -> TensorDataset:
        images = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
        labels = torch.randint(0, cfg.num_classes, (n,), generator=g)
        return TensorDataset(reformat_all(images, target), labels)

    return Splits(draw(cfg.num_samples), draw(max(1, cfg.num_samples // 4)), cfg.num_classes)


def _raw(dataset: Any) -> TensorDataset:
    """A torchvision MNIST-like or CIFAR-10 set's arrays as N×C×H×W uint8 and labels."""
    data = dataset.data
    images = data.unsqueeze(1) if data.ndim == 3 else torch.from_numpy(data).permute(0, 3, 1, 2)
    return TensorDataset(images, torch.as_tensor(dataset.targets, dtype=torch.long))


# Sets whose files do not change while a sweep runs (scikit-learn's, generated, torchvision's
# downloads): a trial template may keep one in memory for the trials it forks (`keep`).
KEEPABLE = ("digits", "fake", *TORCHVISION)
_kept: tuple[str, Splits] | None = None  # (what determines it, the set): the latest kept


def _kept_key(cfg: DataConfig, target: StoredFormat, in_memory: bool) -> str | None:
    """What determines a keepable set (None: not kept). A set to download is not kept: the
    template would fetch it at the same time as the trial it forked."""
    keepable = in_memory and cfg.name in KEEPABLE and not cfg.download
    return repr((cfg, target)) if keepable else None


def keep(cfg: DataConfig, target: StoredFormat, *, workers: int) -> None:
    """Load `cfg`'s in-memory set as a run would and keep it (one set: the latest), so that
    processes forked from this one (a sweep's trial template's trials) find it loaded; they share
    its pages until one writes to them. Nothing for a set KEEPABLE leaves out."""
    global _kept
    key = _kept_key(cfg, target, True)
    if key is not None and (_kept is None or _kept[0] != key):
        _kept = None  # the previous one goes first
        _kept = (key, _load(cfg, target, in_memory=True, workers=workers))


def load(cfg: DataConfig, target: StoredFormat, *, in_memory: bool, workers: int) -> Splits:
    """`cfg`'s data set in the stored layout: decoded once (`in_memory`) or per sample; the set
    `keep` kept when it is the same one."""
    key = _kept_key(cfg, target, in_memory)
    if key is not None and _kept is not None and _kept[0] == key:
        return _kept[1]
    return _load(cfg, target, in_memory=in_memory, workers=workers)


def _load(cfg: DataConfig, target: StoredFormat, *, in_memory: bool, workers: int) -> Splits:
    if cfg.name == "digits":
        # lazy: scikit-learn costs 0.6 s at start-up; only data=digits reads it
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.from_numpy(digits.images).mul(255 / 16).round().to(torch.uint8)
        return _split(images.unsqueeze(1), torch.as_tensor(digits.target).long(), cfg, target)
    if cfg.name == "fake":
        return _fake(cfg, target)
    if cfg.name in TORCHVISION and in_memory:
        train, val = torchvision_pair(cfg)
        pair = [_raw(s) for s in (train, val)]
        fitted = [TensorDataset(reformat_all(s.tensors[0], target), s.tensors[1]) for s in pair]
        return Splits(*fitted, len(train.classes))
    if cfg.name in TORCHVISION:
        train, val = torchvision_pair(cfg, v2.Compose([v2.PILToTensor(), Reformat(target)]))
        return Splits(train, val, len(train.classes))
    train, val, classes = folder_pair(cfg, target)
    if in_memory:
        train, val = (TensorDataset(*as_tensors(s, workers)) for s in (train, val))
    return Splits(train, val, classes)
