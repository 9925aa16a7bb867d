"""Unit tests of the modules `run()` sequences, each on its own: device rules, optimizer and
schedule, the epoch row, the training loop, checkpoints (payload both ways), data, summary."""

from __future__ import annotations

import json
import logging
import math
import pickle
import random
from dataclasses import fields

import numpy as np
import pytest
import torch
from torch import nn

from trainer import checkpoint as ckpt
from trainer import devices
from trainer.config import ConfigError, DataConfig, OptimizerConfig, SchedulerConfig
from trainer.data import build_data
from trainer.layout import RunLayout
from trainer.loop import GracefulStop, Progress, evaluate, train_epoch, train_step
from trainer.metrics import EPOCH_METRICS, Timing, epoch_row
from trainer.models import SmallCNN
from trainer.optim import WarmupCosine, build_optimizer, build_scheduler
from trainer.summary import RunSummary, run_paths

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_auto_device_is_the_cpu_without_accelerators(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert devices.resolve_device("auto") == CPU
    with pytest.raises(ConfigError, match=r"trainer.device=cuda:1 .*no CUDA device"):
        devices.resolve_device("cuda:1")
    with pytest.raises(ConfigError, match="eval.device=mps"):
        devices.resolve_device("mps", key="eval.device")


def test_cuda_index_beyond_the_devices_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="only 2 CUDA device"):
        devices.check_device("trainer.device", "cuda:2")
    devices.check_device("trainer.device", "cuda:1")


def test_rank_device_rules(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.rank_device("auto", 1) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="LOCAL_RANK=2"):
        devices.rank_device("cuda", 2)
    with pytest.raises(ConfigError, match="cannot be combined with trainer.strategy=ddp"):
        devices.rank_device("cuda:0", 0)
    with pytest.raises(ConfigError, match="does not support MPS"):
        devices.rank_device("mps", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.rank_device("auto", 3) == CPU


def test_precision_rules():
    assert devices.resolve_precision("32", CPU) is None
    assert devices.resolve_precision("16-mixed", CPU) is torch.float16
    assert devices.grad_scaler("16-mixed", CPU).is_enabled()
    assert not devices.grad_scaler("bf16-mixed", CPU).is_enabled()


# --- optim ---------------------------------------------------------------------------------


def test_optimizers_take_their_settings():
    model = nn.Linear(3, 2)
    sgd = build_optimizer(OptimizerConfig(lr=0.1, momentum=0.5, nesterov=True), model)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["momentum"] == 0.5 and sgd.param_groups[0]["nesterov"]
    adamw = build_optimizer(OptimizerConfig(name="adamw", lr=1e-3, betas=[0.8, 0.9]), model)
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.param_groups[0]["betas"] == (0.8, 0.9)


def test_cosine_with_warmup_reaches_eta_min():
    factor = WarmupCosine(warmup=2, epochs=6, floor=0.1)
    assert [factor(e) for e in (0, 1)] == pytest.approx([1 / 3, 2 / 3])
    assert factor(2) == pytest.approx(1.0)
    assert factor(6) == pytest.approx(0.1) and factor(9) == pytest.approx(0.1)
    optimizer = build_optimizer(OptimizerConfig(lr=0.5), nn.Linear(2, 2))
    cfg = SchedulerConfig(name="cosine", eta_min=0.05, warmup_epochs=0)
    scheduler = build_scheduler(cfg, optimizer, max_epochs=4)
    lrs = []
    for _ in range(4):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    assert build_scheduler(SchedulerConfig(), optimizer, max_epochs=4) is None


def test_step_schedule_and_its_state_is_plain():
    optimizer = build_optimizer(OptimizerConfig(lr=1.0), nn.Linear(2, 2))
    step = build_scheduler(
        SchedulerConfig(name="step", step_size=2, gamma=0.5), optimizer, max_epochs=5
    )
    for _ in range(4):
        optimizer.step()
        step.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)
    cosine = build_scheduler(SchedulerConfig(name="cosine"), optimizer, max_epochs=3)
    pickle.dumps(cosine.state_dict())  # no closures: plain state


# --- metrics -------------------------------------------------------------------------------


def test_eager_runs_log_no_compile_time_whatever_the_first_step_noise():
    timing = Timing(compiled=False)
    timing.observe_train(first_step_s=0.02, steady_s=0.09, steady_steps=9)
    timing.observe_eval(first_batch_s=0.02, steady_batch_s=0.01)
    assert timing.compile_s() == 0.0
    assert "compiled" not in timing.as_dict()  # summary.json's perf keys stay timings only
    timing.compiled = True
    assert timing.compile_s() == pytest.approx(0.02)


def test_epoch_row_has_exactly_the_logged_names():
    timing = Timing()
    steady = timing.observe_train(first_step_s=2.0, steady_s=0.9, steady_steps=9)
    timing.observe_eval(first_batch_s=0.5, steady_batch_s=0.1)
    row = epoch_row(
        epoch=1,
        train={"loss": 1.0, "acc": 0.5},
        val={"loss": 0.8, "acc": 0.6},
        lr=torch.tensor(0.1),
        timing=timing,
        steady_step_s=steady,
        epoch_s=2.9,
        batch_size=32,
    )
    assert set(row) == {"epoch", *EPOCH_METRICS}
    assert row["perf/compile_s"] == pytest.approx((2.0 - 0.1) + (0.5 - 0.1))
    assert row["perf/step_ms"] == pytest.approx(100.0)
    assert row["perf/samples_per_s"] == pytest.approx(320.0)
    assert isinstance(row["train/lr"], float)


# --- loop ----------------------------------------------------------------------------------


def _loader(n=48, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)


def _train_objects(seed=0):
    torch.manual_seed(seed)
    model = SmallCNN(1, 3, width=4)
    optimizer = build_optimizer(OptimizerConfig(lr=0.05), model)
    return model, optimizer, devices.grad_scaler("32", CPU)


def test_train_step_clips_gradients(monkeypatch):
    model, optimizer, scaler = _train_objects()
    seen = []
    monkeypatch.setattr(nn.utils, "clip_grad_norm_", lambda params, norm: seen.append(norm))
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    loss, logits = train_step(
        model, optimizer, scaler, x, y, device=CPU, dtype=torch.bfloat16, grad_clip=0.5
    )
    assert seen == [0.5] and logits.shape == (4, 3) and loss.dtype == torch.float32
    assert all(p.grad is None for p in model.parameters())  # zeroed after the step


def test_train_epoch_stopped_midway_resumes_to_the_same_result():
    model, optimizer, scaler = _train_objects()
    whole = train_epoch(
        model, _loader(), optimizer, scaler, progress=Progress(), device=CPU, dtype=None,
        grad_clip=None, max_steps=None, stop=GracefulStop(), time_first_step=True,
    )  # fmt: skip
    assert whole.steps == 6 and whole.samples == 48 and whole.steady_steps == 5

    class StopAfter:
        def __init__(self, n):
            self.n = n

        @property
        def requested(self):
            self.n -= 1
            return self.n < 0

    model, optimizer, scaler = _train_objects()
    progress = Progress()
    common = dict(device=CPU, dtype=None, grad_clip=None, max_steps=None, time_first_step=False)
    first = train_epoch(
        model, _loader(), optimizer, scaler, progress=progress, stop=StopAfter(2), **common
    )
    assert first is None and progress.batches_done == 3 and progress.partial["count"] == 24
    rest = train_epoch(
        model, _loader(), optimizer, scaler, progress=progress, stop=GracefulStop(), **common
    )
    assert rest.samples == 48 and progress.partial == {}
    assert rest.loss == pytest.approx(whole.loss) and rest.acc == pytest.approx(whole.acc)


def test_diverged_training_says_how_to_fix_it():
    model, optimizer, scaler = _train_objects()
    optimizer.param_groups[0]["lr"] = float("inf")
    with pytest.raises(FloatingPointError, match="optimizer.lr"):
        for _ in range(3):
            train_epoch(
                model, _loader(), optimizer, scaler, progress=Progress(), device=CPU,
                dtype=None, grad_clip=None, max_steps=None, stop=GracefulStop(),
                time_first_step=False,
            )  # fmt: skip


def test_evaluate_counts_every_sample_of_a_padded_last_batch():
    model, _, _ = _train_objects()
    result = evaluate(model, _loader(n=20, batch=8), device=CPU, dtype=None, batch_size=8)
    assert result.samples == 20 and 0.0 <= result.acc <= 1.0 and math.isfinite(result.loss)


# --- checkpoint ----------------------------------------------------------------------------


def test_rng_state_round_trips_as_plain_values(tmp_path):
    torch.save(ckpt.rng_state(), tmp_path / "rng.pt")
    state = torch.load(tmp_path / "rng.pt", weights_only=True)
    draws = (random.random(), float(np.random.rand()), float(torch.rand(())))
    ckpt.set_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == draws


def _state(seed=0):
    model, optimizer, scaler = _train_objects(seed)
    scheduler = build_scheduler(SchedulerConfig(name="cosine"), optimizer, max_epochs=3)
    return ckpt.TrainState(
        model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
        progress=Progress(), model_name="small_cnn", num_classes=3, sample_shape=(1, 8, 8),
        config={"trainer": {"seed": seed}},
    )  # fmt: skip


def test_train_state_saves_and_restores_every_part(tmp_path):
    saved = _state(0)
    train_epoch(
        saved.model, _loader(), saved.optimizer, saved.scaler, progress=saved.progress,
        device=CPU, dtype=None, grad_clip=None, max_steps=None, stop=GracefulStop(),
        time_first_step=False,
    )  # fmt: skip
    saved.scheduler.step()
    saved.progress.epoch, saved.progress.best = 1, 0.5
    path = RunLayout(tmp_path).last
    saved.save(path)
    payload = torch.load(path)  # torch's default: weights_only=True
    assert payload["format_version"] == ckpt.FORMAT_VERSION and payload["num_classes"] == 3
    expected = random.random()
    restored = _state(1)
    restored.restore(path)
    assert random.random() == expected  # the RNG continues where the saved run stood
    assert restored.progress.epoch == 1 and restored.progress.step == saved.progress.step
    for a, b in zip(saved.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert restored.scheduler.last_epoch == 1
    assert (
        restored.optimizer.state_dict()["state"].keys()
        == saved.optimizer.state_dict()["state"].keys()
    )


def _legacy_checkpoint(path, state):
    """A checkpoint as the previous release wrote it: numpy's RNG state pickled."""
    payload = state.payload()
    payload["rng"] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    torch.save({"format_version": 1, **payload}, path)


def test_old_checkpoints_resume_with_a_warning_but_nowhere_else(tmp_path, caplog):
    path = tmp_path / "old.pt"
    _legacy_checkpoint(path, _state())
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    with caplog.at_level(logging.WARNING, logger="trainer.checkpoint"):
        _state(1).restore(path)
    assert "older release" in caplog.text and "weights_only=False" in caplog.text
    with pytest.raises(ConfigError, match=r"checkpoint=.*older release.*trainer.resume="):
        ckpt.load(path, key="checkpoint")


# --- data ----------------------------------------------------------------------------------


def test_digits_loaders_have_full_batches_and_seeded_order():
    cfg = DataConfig(name="digits", batch_size=100)
    data = build_data(cfg, channels=3, size=16, seed=0, pin_memory=False)
    assert data.sample_shape == (3, 16, 16) and data.num_classes == 10
    assert all(y.shape[0] == 100 for _, y in data.train)  # no smaller last batch
    assert sum(y.shape[0] for _, y in data.val) == round(1797 * cfg.val_fraction)
    data.set_epoch(1)
    first = next(iter(data.train))[1]
    again = build_data(cfg, channels=3, size=16, seed=0, pin_memory=False)
    again.set_epoch(1)
    assert torch.equal(next(iter(again.train))[1], first)
    again.set_epoch(2)
    assert not torch.equal(next(iter(again.train))[1], first)


def test_ranks_split_the_global_batch():
    cfg = DataConfig(name="fake", batch_size=8, num_samples=64, image_shape=[1, 4, 4])
    one = build_data(cfg, channels=None, size=None, seed=0, pin_memory=False)
    two = [
        build_data(cfg, channels=None, size=None, seed=0, pin_memory=False, rank=r, world_size=2)
        for r in (0, 1)
    ]
    global_batch = next(iter(one.train))[1]
    parts = [next(iter(d.train))[1] for d in two]
    assert sorted(torch.cat(parts).tolist()) == sorted(global_batch.tolist())
    with pytest.raises(ConfigError, match="data.batch_size=7"):
        build_data(
            DataConfig(name="fake", batch_size=7), channels=None, size=None, seed=0,
            pin_memory=False, rank=0, world_size=2,
        )  # fmt: skip


# --- summary -------------------------------------------------------------------------------


def _summary(tmp_path) -> RunSummary:
    RunLayout(tmp_path).last.parent.mkdir(parents=True, exist_ok=True)
    RunLayout(tmp_path).last.write_bytes(b"")  # the summary names only written checkpoints
    return RunSummary(
        status="finished", epochs_completed=1, steps=3, metrics={"val/acc": 0.5},
        best={"name": "val/acc", "value": 0.5, "epoch": 1, "mode": "max"},
        perf={"compile_s": 0.0}, compile={"enabled": False}, device="cpu", strategy="single",
        world_size=1, precision="32", cpu={"threads": 1}, torch=torch.__version__,
        paths=run_paths(RunLayout(tmp_path), wandb_run_dir=None, wandb_run_id=None),
    )  # fmt: skip


def test_summary_round_trips_and_keeps_its_keys(tmp_path):
    summary = _summary(tmp_path)
    summary.write(RunLayout(tmp_path).summary)
    doc = RunSummary.read(RunLayout(tmp_path).summary)
    assert list(doc) == [f.name for f in fields(RunSummary)]
    assert doc["paths"]["checkpoint"] == str(tmp_path / "checkpoints" / "last.pt")
    assert summary.tracker_values({"compile/graphs": 0}) == {
        "best/val/acc": 0.5,
        "perf/compile_s": 0.0,
        "compile/graphs": 0,
    }


@pytest.mark.parametrize("content", [None, '{"status": "finis', "[1, 2]"])
def test_missing_or_torn_summary_reads_as_none(tmp_path, caplog, content):
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="trainer.summary"):
        assert RunSummary.read(path) is None
    assert str(path) in caplog.text
    path.write_text(json.dumps({"status": "finished"}))
    assert RunSummary.read(path) == {"status": "finished"}


def test_planned_steps_counts_what_is_left():
    from trainer.compiling.auto import planned_steps
    from trainer.config import TrainerConfig

    assert planned_steps(TrainerConfig(max_epochs=3), per_epoch=10, done=4) == 26
    assert planned_steps(TrainerConfig(max_epochs=3, max_steps=12), per_epoch=10, done=4) == 8
    assert planned_steps(TrainerConfig(max_epochs=1, max_steps=5), per_epoch=10, done=7) == 0
