"""Model builders: a small CNN for CPU work, torchvision's classification models by name, and a
tiny Vision Transformer. Torchvision models come from torchvision's own builder, unmodified."""

from __future__ import annotations

import difflib
from functools import cache

import torch
from torch import nn

from trainer.config.schema import ConfigError, ModelConfig

BUILTIN = ("small_cnn", "vit_tiny")


class SmallCNN(nn.Module):
    """Three 3×3 convolutions, global average pooling and a linear head; any input size."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        self.features = nn.Sequential(
            *block(in_channels, width),
            *block(width, 2 * width),
            nn.MaxPool2d(2),
            *block(2 * width, 2 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@cache
def torchvision_names() -> tuple[str, ...]:
    """Classification models known to torchvision's registry."""
    # lazy: torchvision costs 1.2 s at start-up; preflight never loads it for a built-in model
    import torchvision.models as tvm

    return tuple(tvm.list_models(module=tvm))


def input_spec(cfg: ModelConfig) -> tuple[int | None, int | None]:
    """(channels, square size) the model wants its inputs in; None keeps the data's own."""
    if cfg.name == "small_cnn":
        return cfg.in_channels, cfg.image_size
    # torchvision models take RGB and need a few pixels to survive their downsampling.
    return cfg.in_channels or 3, cfg.image_size or 32


def check_name(name: str) -> None:
    """Raise a ConfigError with close matches when `name` is no model we can build."""
    if name in BUILTIN:  # ours: no need to import torchvision's registry (1 s) to know it
        return
    known = BUILTIN + torchvision_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join('model.name=' + c for c in close)}?" if close else ""
        raise ConfigError(
            f"model.name={name} is not a model this trainer can build.{hint} Use a config of "
            f"conf/model/ (small_cnn, resnet18, resnet50, mobilenet_v3_small, vit_tiny) or any "
            "classification model listed by torchvision.models.list_models()."
        )


def build_model(
    cfg: ModelConfig, *, num_classes: int, in_channels: int, image_size: int
) -> nn.Module:
    check_name(cfg.name)
    kwargs = dict(cfg.kwargs)
    try:
        if cfg.name == "small_cnn":
            return SmallCNN(in_channels, num_classes, width=cfg.width, **kwargs)
        if cfg.name == "vit_tiny":
            # lazy: torchvision, as in torchvision_names()
            from torchvision.models import VisionTransformer

            return VisionTransformer(image_size=image_size, num_classes=num_classes, **kwargs)
        import torchvision.models as tvm  # lazy: torchvision, as in torchvision_names()

        return tvm.get_model(cfg.name, weights=None, num_classes=num_classes, **kwargs)
    except (TypeError, ValueError, AssertionError) as err:
        raise ConfigError(
            f"model.name={cfg.name} cannot be built with model.kwargs={kwargs} "
            f"({err}); fix or remove the offending entry of model.kwargs."
        ) from None
