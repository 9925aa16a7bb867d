"""The settings that let one GPU run at full speed: TF32 and cuDNN's autotuner (process-wide,
CUDA only) and the channels-last memory format for convolutional models. Each returns what it
applied, for the `speed` section of summary.json."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer.train.optim import kernel_name

CONV_SHARE = 0.5  # channels_last=auto: Conv2d weights hold at least this share of the parameters


def apply_backend_flags(*, tf32: bool, cudnn_benchmark: bool, device: torch.device) -> dict:
    """TF32 matmuls and convolutions and cuDNN benchmark mode on CUDA; elsewhere torch's exact
    fp32 defaults (the flags are process-wide, so each run sets them both ways)."""
    cuda = device.type == "cuda"
    torch.set_float32_matmul_precision("high" if cuda and tf32 else "highest")
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "tf32" if tf32 else "ieee"
    else:  # torch before the fp32_precision switches
        torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cuda and cudnn_benchmark
    return {
        "tf32": cuda and tf32,
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def conv_share(model: nn.Module) -> float:
    """The share of `model`'s parameters that are Conv2d weights."""
    total = sum(p.numel() for p in model.parameters())
    conv = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Conv2d))
    return conv / max(total, 1)


def wants_channels_last(setting: Any, model: nn.Module, device: torch.device) -> bool:
    """trainer.channels_last: auto means on CUDA for a convolutional model (ResNets,
    MobileNets, small_cnn), not for ViT/Swin/ConvNeXt, whose weights are mostly linear layers."""
    if setting == "auto":
        return device.type == "cuda" and conv_share(model) >= CONV_SHARE
    return bool(setting)


def maybe_channels_last(model: nn.Module, setting: Any, device: torch.device) -> bool:
    """Convert `model` in place to channels_last when `setting` says so; returns whether."""
    use = wants_channels_last(setting, model, device)
    if use:
        model.to(memory_format=torch.channels_last)
    return use


def record(flags: dict[str, Any], transform: Any, optimizer: torch.optim.Optimizer) -> dict:
    """The `speed` section of summary.json: the backend flags, whether training batches are
    channels-last (`transform`: the training BatchTransform), and the optimizer's kernel."""
    return {
        **flags,
        "channels_last": transform.memory_format == torch.channels_last,
        "optimizer_kernel": kernel_name(optimizer),
    }
