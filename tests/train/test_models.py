"""Model builders: shapes, torchvision's own builders, helpful errors for unknown names."""

from __future__ import annotations

import pytest
import torch
import torchvision

from trainer.config.schema import ConfigError, ModelConfig
from trainer.train.models import build_model, check_name, input_spec


@pytest.mark.parametrize(
    "name", ["small_cnn", "resnet18", "mobilenet_v3_small", "vit_tiny", "resnet50"]
)
def test_builds_and_runs(name, cfg_factory):
    from trainer.preflight import validate

    conf = validate(cfg_factory(f"model={name}")).model
    channels, size = input_spec(conf)
    channels, size = channels or 1, size or 8
    model = build_model(conf, num_classes=10, in_channels=channels, image_size=size).eval()
    with torch.no_grad():
        out = model(torch.randn(2, channels, size, size))
    assert out.shape == (2, 10)


def test_torchvision_state_loads_into_get_model():
    model = build_model(ModelConfig(name="resnet18"), num_classes=7, in_channels=3, image_size=32)
    plain = torchvision.models.get_model("resnet18", num_classes=7)
    plain.load_state_dict(model.state_dict(), strict=True)


def test_any_torchvision_name_works():
    model = build_model(
        ModelConfig(name="squeezenet1_1"), num_classes=3, in_channels=3, image_size=32
    )
    assert isinstance(model, torchvision.models.SqueezeNet)


def test_unknown_model_suggests_close_matches():
    with pytest.raises(ConfigError) as err:
        check_name("resnt18")
    assert "model.name=resnet18" in str(err.value)


def test_bad_kwargs_name_the_key():
    with pytest.raises(ConfigError, match="model.kwargs"):
        build_model(
            ModelConfig(name="resnet18", kwargs={"depth": 3}),
            num_classes=10,
            in_channels=3,
            image_size=32,
        )
