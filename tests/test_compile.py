"""Unit tests of the compile knobs: validation before torch, hardware checks, regional blocks,
the compiled optimizer, recompile reporting and the recompile limit (tiny models, eager backends)."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
import torchvision
from torch import nn

from trainer import compiling
from trainer.config import CompileConfig, ConfigError, validate
from trainer.models import SmallCNN

from .conftest import make_cfg


@pytest.fixture(autouse=True)
def _clean_dynamo():
    compiling.reset()
    yield
    compiling.reset()


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _cfg(**kw) -> CompileConfig:
    return CompileConfig(**{"backend": "eager", **kw})


def test_unknown_mode_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="compile.mode='fastest'.*max-autotune-no-cudagraphs"):
        compiling.check_config(CompileConfig(mode="fastest"))


def test_every_torch_mode_is_accepted():
    for mode in compiling.valid_modes():
        compiling.check_config(CompileConfig(mode=mode))
    assert {"default", "reduce-overhead", "max-autotune", "lite"} <= set(compiling.valid_modes())


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="compile.backend='indcutor'.*aot_eager.*inductor"):
        compiling.check_config(CompileConfig(backend="indcutor"))


def test_backend_module_registers_a_custom_backend(tmp_path, monkeypatch):
    (tmp_path / "my_backend_mod.py").write_text(
        "import torch._dynamo\n"
        "calls = []\n"
        "@torch._dynamo.register_backend(name='my_counting_backend')\n"
        "def my_counting_backend(gm, example_inputs):\n"
        "    calls.append(gm)\n"
        "    return gm.forward\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = CompileConfig(backend="my_counting_backend", backend_module="my_backend_mod")
    model = compiling.apply_compile(_tiny(), compile_config=cfg)
    model(torch.randn(2, 4))
    assert len(sys.modules["my_backend_mod"].calls) == 1
    with pytest.raises(ConfigError, match="compile.backend_module=no_such_mod"):
        compiling.check_config(CompileConfig(backend_module="no_such_mod"))


def test_options_with_a_non_default_mode_is_rejected_by_us():
    with pytest.raises(ConfigError, match="compile.options and compile.mode=max-autotune"):
        validate(make_cfg("compile.mode=max-autotune", "compile.options={epilogue_fusion: true}"))


def test_options_reach_torch_compile(monkeypatch):
    seen = {}
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: seen.update(kw))
    cfg = CompileConfig(backend="inductor", options={"epilogue_fusion": True}, dynamic=True)
    compiling.apply_compile(_tiny(), compile_config=cfg, device=torch.device("cpu"))
    assert seen == {
        "backend": "inductor",
        "fullgraph": False,
        "dynamic": True,
        "options": {"epilogue_fusion": True},
    }


@pytest.mark.parametrize(
    "override, key",
    [("compile.target=layers", "compile.target"), ("compile.auto_steps=0", "compile.auto_steps")],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key):
        validate(make_cfg(override))


def test_auto_preset_and_new_keys_compose():
    conf = validate(make_cfg("compile=auto"))
    assert conf.compile.auto and conf.compile.target == "model" and not conf.compile.optimizer


def test_disable_leaves_the_model_eager():
    model = compiling.apply_compile(_tiny(), compile_config=_cfg(disable=True))
    assert not compiling.is_compiled(model)


def test_dynamic_true_compiles_one_graph_for_every_batch_size():
    model = compiling.apply_compile(_tiny(), compile_config=_cfg(dynamic=True))
    for batch in (2, 3, 5):
        model(torch.randn(batch, 4))
    stats = compiling.compile_stats()
    assert stats["graphs"] == 1 and stats["recompiles"] == 0


def test_dynamic_false_recompiles_on_a_new_shape_and_says_why():
    model = compiling.apply_compile(_tiny(), compile_config=_cfg(dynamic=False))
    model(torch.randn(2, 4))
    model(torch.randn(3, 4))
    stats = compiling.compile_stats()
    assert stats["recompiles"] == 1 and "size" in stats["recompile_reasons"][0]


def test_changing_a_module_attribute_recompiles_and_is_reported():
    model = compiling.apply_compile(_tiny(), compile_config=_cfg())
    x = torch.randn(2, 4)
    model(x).sum().backward()
    model[1].inplace = True  # a guarded module attribute
    model(x).sum().backward()
    stats = compiling.compile_stats()
    assert stats["graphs"] == 2 and stats["recompiles"] == 1
    assert "inplace" in stats["recompile_reasons"][0]


class _Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def test_fullgraph_with_a_graph_break_says_where_and_what_to_do():
    cfg = _cfg(fullgraph=True)
    with pytest.raises(ConfigError, match=r"graph break.*test_compile\.py:\d+.*fullgraph=false"):
        compiling.apply_compile(_Breaks(), compile_config=cfg, example=torch.randn(2, 4))


def test_graph_breaks_are_counted_with_reasons():
    model = compiling.apply_compile(_Breaks(), compile_config=_cfg())
    model(torch.randn(2, 4))
    stats = compiling.compile_stats()
    assert stats["graphs"] == 2 and stats["graph_breaks"] == 1 and stats["graph_break_reasons"]


def test_explain_prints_dynamo_explanation(capsys):
    compiling.apply_compile(_Breaks(), compile_config=_cfg(explain=True), example=torch.randn(2, 4))
    out = capsys.readouterr().out
    assert "Graph Count: 2" in out and "Graph Break Count: 1" in out


def test_explain_and_fullgraph_check_leave_training_untouched():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    example = torch.randn(6, 4)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    compiling.apply_compile(
        model, compile_config=_cfg(explain=True, fullgraph=True), example=example
    )
    assert torch.equal(torch.rand(3), expected)  # no dropout draw consumed
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key  # BatchNorm running stats unchanged


def test_reduce_overhead_on_cpu_is_said_visibly(caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.compiling"):
        notes = compiling.check_hardware(CompileConfig(mode="reduce-overhead"), torch.device("cpu"))
    assert notes and "CUDA graphs" in notes[0] and "CUDA graphs" in caplog.text


def test_missing_cxx_compiler_is_an_error_before_inductor(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ConfigError, match="C\\+\\+ compiler.*compile.backend=aot_eager"):
        compiling.check_hardware(CompileConfig(), torch.device("cpu"))
    compiling.check_hardware(CompileConfig(backend="aot_eager"), torch.device("cpu"))


def test_old_gpu_is_an_error_before_inductor(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (6, 1))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla P100")
    with pytest.raises(ConfigError, match="compute capability 7.0.*6.1"):
        compiling.check_hardware(CompileConfig(), torch.device("cuda"))


def test_blocks_target_finds_resnet_and_vit_blocks():
    resnet = torchvision.models.resnet18(num_classes=10)
    blocks = compiling.repeated_blocks(resnet)
    assert len(blocks) == 8
    assert all(isinstance(b, torchvision.models.resnet.BasicBlock) for b in blocks)
    vit = torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=3, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    assert len(compiling.repeated_blocks(vit)) == 3


def test_blocks_target_compiles_in_place_with_clean_keys():
    model = torchvision.models.resnet18(num_classes=10)
    keys = list(model.state_dict())
    compiling.apply_compile(model, compile_config=_cfg(target="blocks"))
    assert model._compiled_call_impl is None and compiling.is_compiled(model)
    model(torch.randn(2, 3, 32, 32))
    assert list(model.state_dict()) == keys
    assert compiling.compile_stats()["graphs"] >= 4  # one per distinct block shape


def test_blocks_target_without_repeats_compiles_the_whole_model():
    model = compiling.apply_compile(SmallCNN(1, 10, width=4), compile_config=_cfg(target="blocks"))
    assert model._compiled_call_impl is not None


def test_compiled_optimizer_with_a_scheduler_never_recompiles():
    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5**e)
    assert compiling.maybe_compile_optimizer(opt, _cfg(optimizer=True))
    for _ in range(4):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    stats = compiling.compile_stats()
    assert stats["graphs"] >= 1 and stats["recompiles"] == 0
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(0.1 * 0.5**4)


def test_recompile_limit_is_loud_and_can_be_an_error(caplog):
    import torch._dynamo

    # config.patch restores the option on exit (monkeypatch would hide it from Dynamo)
    with torch._dynamo.config.patch(recompile_limit=2):
        model = compiling.apply_compile(_tiny(), compile_config=_cfg(dynamic=False))
        with caplog.at_level(logging.WARNING, logger="trainer.compiling"):
            for batch in range(1, 5):
                model(torch.randn(batch, 4))
        assert compiling.compile_stats()["recompile_limit_hit"]
        assert "RECOMPILE LIMIT HIT" in caplog.text and "last reason" in caplog.text

        compiling.reset()
        model = compiling.apply_compile(
            _tiny(), compile_config=_cfg(dynamic=False, fail_on_recompile_limit=True)
        )
        with pytest.raises(compiling.CompileError, match="recompile limit.*last reason"):
            try:
                for batch in range(1, 5):
                    model(torch.randn(batch, 4))
            except Exception as err:
                compiling.raise_if_limit_error(err)
                raise


def test_tracker_summary_is_flat_and_keeps_the_auto_figures():
    section = {
        "enabled": False,
        "graphs": 0,
        "options": None,
        "graph_break_reasons": {"print": 2},
        "recompile_reasons": [],
        "auto": {"decision": "eager", "eager_total_s": 1.0},
    }
    assert compiling.summary_for_tracker(section) == {
        "compile/enabled": False,
        "compile/graphs": 0,
        "compile/graph_break_reasons": ["2x print"],
        "compile/recompile_reasons": [],
        "compile/auto/decision": "eager",
        "compile/auto/eager_total_s": 1.0,
    }


def test_auto_measurement_leaves_the_model_and_the_rng_untouched():
    from torch.utils.data import DataLoader, TensorDataset

    from trainer.compiling import auto as compile_auto

    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    model = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    report = compile_auto.decide(
        model,
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        DataLoader(data, batch_size=8, shuffle=True),
        cfg=_cfg(auto=True, auto_steps=2),
        device=torch.device("cpu"),
        planned_steps=10,
    )
    assert report["decision"] in ("eager", "compile")
    assert torch.equal(torch.rand(3), expected)  # training after the measurement is unchanged
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
