"""A PBT member inside its trial: new values go into the same tensors and fields, a leader's
checkpoint loads in place (the optimizer's tensors keep their identity), and a member stopped
between its decision and its checkpoint makes the same copy again when it resumes."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainer.config.schema import ConfigError, OptimizerConfig, SchedulerConfig, TrainerConfig
from trainer.outputs.layout import RunLayout
from trainer.sweep.search import pbt_policy
from trainer.train import pbt
from trainer.train.checkpoint import TrainState
from trainer.train.optim import build_optimizer, build_scheduler
from trainer.train.step import Progress
from trainer.trial import pbt_files as exchange

LR = {"distribution": "log_uniform_values", "min": 0.001, "max": 0.5}


def state(lr=0.1, seed=0, name="sgd") -> TrainState:
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    opt = build_optimizer(OptimizerConfig(name=name, lr=lr, momentum=0.9), model)
    sched = build_scheduler(SchedulerConfig(name="cosine"), opt, max_epochs=4)
    s = TrainState(
        model=model, optimizer=opt, scheduler=sched, scaler=torch.amp.GradScaler("cpu", enabled=False),
        progress=Progress(), model_name="linear", num_classes=3, sample_shape=(4,),
        config={"optimizer": {"lr": lr, "momentum": 0.9}, "trainer": {"label_smoothing": 0.0}},
    )  # fmt: skip
    for _ in range(2):  # momentum buffers exist
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    return s


def test_a_new_learning_rate_keeps_the_schedules_position():
    s = state(lr=0.1)
    s.scheduler.step()
    factor = s.optimizer.param_groups[0]["lr"] / 0.1
    pbt.apply(s, TrainerConfig(), {"optimizer.lr": 0.02, "trainer.label_smoothing": 0.1})
    assert s.optimizer.param_groups[0]["lr"] == pytest.approx(0.02 * factor)
    assert s.scheduler.base_lrs == [0.02] and s.config["optimizer"]["lr"] == 0.02
    s.scheduler.step()  # the schedule goes on from the new base
    assert s.optimizer.param_groups[0]["lr"] < 0.02 * factor


def test_tensor_values_change_in_place():
    s = state()
    group = s.optimizer.param_groups[0]
    group["lr"] = lr = torch.tensor(0.1)  # as under compile.optimizer
    trainer = TrainerConfig()
    pbt.apply(s, trainer, {"optimizer.lr": 0.05, "trainer.label_smoothing": 0.1})
    assert group["lr"] is lr and float(lr) == pytest.approx(0.05)
    assert trainer.label_smoothing == 0.1


def test_a_leaders_optimizer_state_loads_into_the_same_tensors():
    mine, leader = state(seed=0), state(seed=1, lr=0.3)
    buffers = [mine.optimizer.state[p]["momentum_buffer"] for p in mine.model.parameters()]
    pbt.load_optimizer_in_place(mine.optimizer, copy.deepcopy(leader.optimizer.state_dict()))
    after = [mine.optimizer.state[p]["momentum_buffer"] for p in mine.model.parameters()]
    theirs = [leader.optimizer.state[p]["momentum_buffer"] for p in leader.model.parameters()]
    assert all(a is b for a, b in zip(after, buffers, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(after, theirs, strict=True))
    assert mine.optimizer.param_groups[0]["lr"] == leader.optimizer.param_groups[0]["lr"]


def test_momentum_with_adamw_is_refused_before_training(tmp_path):
    s = state(name="adamw")
    settings = exchange.Settings(
        str(tmp_path / "pbt"), {"optimizer.momentum": {"values": [0.5, 0.9]}}, "val/acc", True,
        member="a", **pbt_policy.DEFAULTS,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="optimizer.momentum: optimizer AdamW has no momentum"):
        pbt.Member(settings, RunLayout(tmp_path / "runs" / "a")).join(s, TrainerConfig())


def test_a_member_stopped_after_deciding_copies_again_when_it_resumes(tmp_path):
    ask = pbt_policy.decide  # the answer its agent would give
    folder = tmp_path / "pbt"
    settings = {"parameters": {"optimizer.lr": LR}, "metric": "val/acc", "maximize": True}
    settings.update(pbt_policy.DEFAULTS)
    leader = state(seed=1, lr=0.3)
    leader_layout = RunLayout(tmp_path / "runs" / "b")
    member_b = pbt.Member(
        exchange.Settings(str(folder), member="b", **settings), leader_layout, ask
    )
    member_b.join(leader, TrainerConfig(max_epochs=4))  # a fresh start: its lineage's epoch 0
    leader.progress.epoch = 1
    leader.save(leader_layout.last)
    assert member_b.after_epoch(leader, TrainerConfig(max_epochs=4), {"val/acc": 0.9}) is False

    lagging, layout = state(seed=0, lr=0.01), RunLayout(tmp_path / "runs" / "a")
    lagging.progress.epoch = 1
    lagging.progress.history = [{"val/acc": 0.2}]
    lagging.save(layout.last)
    member = pbt.Member(exchange.Settings(str(folder), member="a", **settings), layout, ask)
    member.lineage.add(exchange.Step(0, {"optimizer.lr": 0.01}))
    assert member.after_epoch(lagging, TrainerConfig(max_epochs=4), {"val/acc": 0.2}) is True
    step = member.lineage.steps[-1]
    assert step.copied_from == "b" and step.epoch == 1
    assert torch.equal(lagging.model.weight, leader.model.weight)
    # killed before last.pt was saved again: it resumes from its own epoch-1 checkpoint
    resumed = state(seed=0, lr=0.01)
    resumed.restore(layout.last)
    assert not torch.equal(resumed.model.weight, leader.model.weight)
    again = pbt.Member(exchange.Settings(str(folder), member="a", **settings), layout)
    again.join(resumed, TrainerConfig(max_epochs=4))
    assert torch.equal(resumed.model.weight, leader.model.weight)
    assert resumed.scheduler.base_lrs == [pytest.approx(step.params["optimizer.lr"])]
    assert [s.epoch for s in exchange.Lineage.read(folder, "a").steps] == [0, 1]
