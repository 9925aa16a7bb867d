"""compile.optimizer: the standard loop (with and without a cosine schedule) compiles the
optimizer's update without a graph break, a recompile or a third-party warning, and matches
the eager optimizer; under compile.fullgraph a graph break is an error, whatever compiled it."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from trainer import compiling
from trainer.compiling import CompileError
from trainer.config.schema import CompileConfig


@pytest.fixture(autouse=True)
def _clean_dynamo():
    compiling.reset()
    yield
    compiling.reset()


def _cfg(**kw) -> CompileConfig:
    return CompileConfig(backend="aot_eager", optimizer=True, **kw)


def _loop(model, opt, sched, steps=4):
    torch.manual_seed(1)
    for _ in range(steps):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


@pytest.mark.parametrize("cosine", [False, True])
@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_compiled_optimizer_has_no_break_recompile_or_warning(kind, cosine):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    eager_model = copy.deepcopy(model)

    def make(m):
        opt = (
            torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
            if kind == "sgd"
            else torch.optim.AdamW(m.parameters(), lr=0.01)
        )
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4) if cosine else None
        return opt, sched

    opt, sched = make(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning (profiler, scheduler order) fails
        assert compiling.maybe_compile_optimizer(opt, _cfg(fullgraph=True))
        _loop(model, opt, sched)
    stats = compiling.compile_stats()
    assert stats["graphs"] == 1, stats
    assert stats["graph_breaks"] == 0 and stats["recompiles"] == 0, stats
    _loop(eager_model, *make(eager_model))
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_the_optimizer_compiles_within_the_first_step():
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    compiling.maybe_compile_optimizer(opt, _cfg())
    _loop(model, opt, None, steps=1)  # perf.compile_s is first minus steady step: counted
    assert compiling.compile_stats()["graphs"] == 1
    _loop(model, opt, None, steps=3)
    assert compiling.compile_stats()["graphs"] == 1
    assert compiling.compile_stats()["recompiles"] == 0


def test_compiled_optimizer_runs_step_hooks():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    opt.register_step_post_hook(lambda *a: calls.append("post"))
    compiling.maybe_compile_optimizer(opt, _cfg())
    _loop(model, opt, None, steps=3)
    assert calls == ["post"] * 3


class _Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        print("", end="")  # a graph break
        return self.inner(x)


def test_a_graph_break_under_fullgraph_is_an_error_in_blocks_too():
    model = nn.Sequential(_Breaks(), _Breaks())
    compiling.apply_compile(
        model, compile_config=CompileConfig(backend="eager", target="blocks", fullgraph=True)
    )
    with pytest.raises(CompileError, match="compile.fullgraph=true but block _Breaks"):
        model(torch.randn(2, 4))
