"""compile=auto: the measurement leaves the model and the RNG untouched, times the very training
step (precision, clipping), plans the steps the run has left, and chooses eager for a small CNN
on this CPU (a whole run, slow)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.compiling.test_compile import _cfg, _clean_dynamo, _tiny  # noqa: F401 (a fixture)
from trainer.config.schema import TrainerConfig
from trainer.run import run
from trainer.train import compile_auto
from trainer.train.step import train_step


def test_auto_measurement_leaves_the_model_and_the_rng_untouched(caplog):
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    model = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    caplog.set_level(logging.INFO, logger="trainer")
    report = compile_auto.decide(
        model,
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        DataLoader(data, batch_size=8, shuffle=True),
        cfg=_cfg(auto=True, auto_steps=2),
        device=torch.device("cpu"),
        planned_steps=10,
    )
    assert report["decision"] in ("eager", "compile")
    # the decision is information, and the measured copy's compile is no news about the run's model
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("trainer")]
    assert any(lvl == logging.INFO and "compile=auto chose" in m for lvl, m in said), said
    assert not any(lvl >= logging.INFO and m.startswith("compiled ") for lvl, m in said), said
    assert torch.equal(torch.rand(3), expected)  # training after the measurement is unchanged
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_auto_times_the_training_step_with_its_precision_and_clipping(monkeypatch):
    calls = []

    def recording_step(*args, **kwargs):
        rules = args[5]
        calls.append((rules.dtype, rules.grad_clip, args[2].is_enabled()))
        return train_step(*args, **kwargs)

    monkeypatch.setattr(compile_auto, "train_step", recording_step)
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    recipe = compile_auto.StepRecipe(
        torch.device("cpu"), precision="bf16-mixed", dtype=torch.bfloat16, grad_clip=1.0
    )
    compile_auto.decide(
        _tiny(),
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        DataLoader(data, batch_size=8),
        cfg=_cfg(auto=True, auto_steps=2),
        device=recipe.device,
        planned_steps=10,
        recipe=recipe,
    )
    # warm-up, two compiling steps and two timed steps each way, all as training runs them
    assert len(calls) == 1 + 2 + 2 * 2
    assert set(calls) == {(torch.bfloat16, 1.0, False)}


def test_planned_steps_counts_what_is_left():
    planned = compile_auto.planned_steps
    assert planned(TrainerConfig(max_epochs=3), per_epoch=10, done=4) == 26
    assert planned(TrainerConfig(max_epochs=3, max_steps=12), per_epoch=10, done=4) == 8
    assert planned(TrainerConfig(max_epochs=1, max_steps=5), per_epoch=10, done=7) == 0


@pytest.mark.slow  # a whole run, compiled and measured
def test_auto_chooses_eager_for_small_cnn_on_this_cpu(cfg_factory, tmp_path):
    cfg = cfg_factory("compile=auto", "logger=none", "trainer.max_epochs=2", "trainer.device=cpu")
    run(cfg, run_dir=tmp_path)
    comp = json.loads((tmp_path / "summary.json").read_text())["compile"]
    auto = comp["auto"]
    assert auto["decision"] == "eager" and not comp["enabled"]
    assert auto["eager_total_s"] <= auto["compiled_total_s"]
    assert auto["planned_steps"] == 2 * (1437 // 64)
    assert auto["compile_cost_s"] > 0 and auto["eager_step_s"] > 0
    assert comp["graphs"] == 0  # the measuring copy's compiled code was forgotten
