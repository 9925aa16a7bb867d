"""compile.target=blocks as regional compile: each distinct block compiled once, no
recompiles in a standard run (train steps, then evaluation), weights and keys the model's own."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision

from trainer import compiling
from trainer.config.schema import CompileConfig

pytestmark = pytest.mark.slow  # every test here starts processes or compiles


@pytest.fixture(autouse=True)
def _clean_dynamo():
    compiling.reset()
    yield
    compiling.reset()


def _standard_run(model: torch.nn.Module, x: torch.Tensor) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    with torch.no_grad():
        model(x)


@pytest.mark.parametrize(
    "build, kinds",
    [
        # BasicBlocks: layer1 (1 kind), layers 2-4 (a downsampling first block + the second)
        (lambda: torchvision.models.resnet18(num_classes=10), 7),
        # encoder layers: one kind, but the first is fed a differently strided input
        (lambda: torchvision.models.VisionTransformer(32, 8, 3, 2, 16, 32, num_classes=10), 2),
    ],
)
def test_blocks_compile_each_distinct_block_once(build, kinds):
    torch.manual_seed(0)
    model = build()
    eager = copy.deepcopy(model)
    compiling.apply_compile(
        model, compile_config=CompileConfig(backend="aot_eager", target="blocks")
    )
    x = torch.randn(2, 3, 32, 32)
    _standard_run(model, x)
    stats = compiling.compile_stats()
    assert stats["recompiles"] == 0, stats["recompile_reasons"]
    assert stats["graph_breaks"] == 0
    assert stats["graphs"] <= 2 * kinds  # each kind once for training, once for evaluation
    _standard_run(eager, x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x), rtol=1e-4, atol=1e-4)
    assert list(model.state_dict()) == list(eager.state_dict())
