"""Unit tests of the compile knobs: validation before torch, hardware checks, regional blocks,
the compiled optimizer, recompile reporting and the recompile limit (tiny models, eager backends).
compile=auto's measurement is tested in tests/train/test_compile_auto.py."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
import torchvision
from torch import nn

from tests.conftest import make_cfg
from trainer import compiling
from trainer.config.schema import CompileConfig, ConfigError
from trainer.preflight import validate
from trainer.train.models import SmallCNN


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


def test_every_private_torch_api_is_where_torch_private_says():
    """Fails loudly when a torch release moves one of the private names the project uses."""
    import importlib

    from trainer.compiling import torch_private

    missing = [
        f"{module}.{name}"
        for module, name in torch_private.PRIVATE_NAMES
        if not hasattr(importlib.import_module(module), name)
    ]
    assert not missing, f"torch moved {missing}; update trainer/compiling/torch_private.py"
    assert "lite" in compiling.valid_modes() and "epilogue_fusion" in (
        torch_private.inductor_options()
    )


def _private_torch_uses(source: str) -> list[str]:
    """torch._<name> modules imported or attributes read in `source` (strings do not count)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("torch._")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch._"):
            found.append(node.module)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"torch.{node.attr}")
    return found


def test_no_private_torch_api_outside_torch_private():
    from pathlib import Path

    import trainer

    root = Path(trainer.__file__).parent
    offenders = {
        str(path.relative_to(root)): uses
        for path in root.rglob("*.py")
        if path.name != "torch_private.py" and (uses := _private_torch_uses(path.read_text()))
    }
    assert offenders == {}
    assert _private_torch_uses("import torch._dynamo\nx = torch._inductor") == [
        "torch._dynamo",
        "torch._inductor",
    ]


def test_unknown_inductor_option_is_one_paragraph_naming_valid_ones():
    with pytest.raises(ConfigError) as err:
        validate(make_cfg("compile.options={epilogue_fusoin: true}"))
    message = str(err.value)
    assert "compile.options" in message and "epilogue_fusoin" in message
    assert "did you mean epilogue_fusion" in message and "\n" not in message


def test_validate_refuses_a_compile_mode_torch_does_not_know():
    """The sweeper runs this same validate on the trials' fixed config before launching."""
    with pytest.raises(ConfigError, match="compile.mode='fast'.*max-autotune"):
        validate(make_cfg("compile.mode=fast"))
    with pytest.raises(ConfigError, match="compile.backend='indcutor'"):
        validate(make_cfg("compile.backend=indcutor"))
    validate(make_cfg("compile=off", "compile.mode=fast"))  # compile=off: never compiled


@pytest.mark.slow
@pytest.mark.pyversion  # what torch warns of on import differs by interpreter and packages
def test_cpu_compile_prints_no_cuda_home_warning(tmp_path):
    """torch.utils.cpp_extension warns about CUDA_HOME on import when no GPU is visible;
    quiet_cuda_home_probe silences exactly that import (the control shows the warning)."""
    import os
    import subprocess

    env = {**os.environ, "CUDA_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    probe = "from trainer.compiling import quiet_cuda_home_probe; quiet_cuda_home_probe(); "
    results = [
        subprocess.run(
            [sys.executable, "-c", f"{prefix}import torch.utils.cpp_extension"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for prefix in ("", probe)
    ]
    assert "No CUDA runtime is found" in results[0].stderr
    assert results[1].returncode == 0 and "No CUDA runtime" not in results[1].stderr


def test_python_3130_guard_warning_is_said_once_in_our_words(monkeypatch, caplog):
    """Dynamo's RuntimeWarning on Python 3.13.0 is silenced and said once in our words; on
    other Pythons nothing changes."""
    import warnings

    from trainer.compiling import torch_private

    monkeypatch.setattr(torch_private, "_NOTED", [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(torch_private.sys, "version_info", (3, 13, 0, "final", 0))
        torch_private.note_python_3130_guards()
        torch_private.note_python_3130_guards()  # said once
        warnings.warn(
            "Guards may run slower on Python 3.13.0. Consider ...", RuntimeWarning, stacklevel=2
        )
    notes = [r.message for r in caplog.records if "3.13.0" in r.message]
    assert len(notes) == 1 and "3.13.1" in notes[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(torch_private.sys, "version_info", (3, 11, 7, "final", 0))
        torch_private.note_python_3130_guards()
        with pytest.raises(RuntimeWarning):
            warnings.warn("Guards may run slower on Python 3.13.0.", RuntimeWarning, stacklevel=2)
