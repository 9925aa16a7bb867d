"""MNIST-format data sets made on the fly: torchvision's own raw layout
(`<root>/MNIST/raw/train-images-idx3-ubyte`, ...), with learnable classes (a fixed random
template per class plus noise), so nothing is downloaded."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def _write_idx(path: Path, array: np.ndarray) -> None:
    """The idx format: a big-endian magic (0x08 = uint8, then the rank), each dimension, data."""
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist_format(
    root: str | Path, name: str = "mnist", *, train: int = 60_000, test: int = 10_000, seed: int = 0
) -> Path:
    """Write `train` + `test` 28×28 grey images and labels in torchvision's MNIST layout under
    `root` (`name`: mnist or fashion_mnist); returns `root`."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(10, 28, 28))
    raw = Path(root) / FOLDERS[name] / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, size=n)
        noise = rng.integers(0, 256, size=(n, 28, 28))
        images = (0.6 * templates[labels] + 0.4 * noise).round()
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return Path(root)
