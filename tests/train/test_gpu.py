"""One GPU at full speed, checked where it runs (every test is marked `gpu` and skips without
CUDA): CUDA graphs recorded once and then only replayed, max-autotune autotuning, bf16 training
with TF32, channels-last and fused kernels, the device-resident pipeline stepping without a
host-device sync, and DDP on two GPUs against one."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision

from tests.conftest import run_cli
from trainer.config.schema import DataConfig, OptimizerConfig
from trainer.data.plan import Placement, build_data
from trainer.hardware.devices import grad_scaler
from trainer.run import run
from trainer.train import fit, speed
from trainer.train import step as loop
from trainer.train.ema import WeightAverage
from trainer.train.optim import build_optimizer

pytestmark = pytest.mark.gpu
CUDA = ["logger=none", "trainer.device=cuda"]


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture
def graph_counts(monkeypatch):
    """Captures and replays of torch.cuda.CUDAGraph (what CUDA-graph trees record and run),
    snapshotted at the end of every epoch."""
    counts = {"captures": 0, "replays": 0, "epochs": []}
    graph = torch.cuda.CUDAGraph
    begin, replay, record = graph.capture_begin, graph.replay, fit.record_epoch

    def counting_begin(self, *args, **kwargs):
        counts["captures"] += 1
        return begin(self, *args, **kwargs)

    def counting_replay(self):
        counts["replays"] += 1
        return replay(self)

    def snapshot(job, row, view):
        record(job, row, view)
        counts["epochs"].append((counts["captures"], counts["replays"]))

    monkeypatch.setattr(graph, "capture_begin", counting_begin)
    monkeypatch.setattr(graph, "replay", counting_replay)
    monkeypatch.setattr(fit, "record_epoch", snapshot)
    return counts


def test_reduce_overhead_records_cuda_graphs_once_then_only_replays(
    cfg_factory, tmp_path, graph_counts
):
    cfg = cfg_factory("compile=reduce-overhead", *CUDA, "trainer.max_epochs=3")
    result = run(cfg, run_dir=tmp_path)
    comp = _summary(tmp_path)["compile"]
    assert comp["cudagraph_skips"] == 0, comp["cudagraph_skip_reasons"]
    assert comp["recompiles"] == 0, comp["recompile_reasons"]
    (c1, r1), (_, r2), (c3, r3) = graph_counts["epochs"]
    steps = 1437 // 64  # digits: training steps per epoch
    assert c1 > 0 and c3 == c1, graph_counts  # recorded in epoch 1, never again
    assert r2 - r1 >= steps and r3 - r2 >= steps, graph_counts  # every later step replays
    assert result["val/acc"] > 0.5


@pytest.mark.slow
def test_max_autotune_autotunes(tmp_path):
    """A fresh process and compile cache, so the autotuning is done, not read from a cache."""
    proc = run_cli(
        "compile=max-autotune", *CUDA, "trainer.max_epochs=1", "trainer.max_steps=3",
        f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
        env={"TRAINER_CACHE_DIR": str(tmp_path / "cache")}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    comp = _summary(tmp_path / "run")["compile"]
    assert comp["autotuned_ops"] > 0 and comp["mode"] == "max-autotune"
    assert comp["recompiles"] == 0 and comp["cudagraph_skips"] == 0


def test_bf16_training_with_the_fast_settings(cfg_factory, tmp_path):
    cfg = cfg_factory(
        "compile=off", *CUDA, "trainer.precision=bf16-mixed", "trainer.max_epochs=3",
        "trainer.ema=0.99", "trainer.label_smoothing=0.1",
    )  # fmt: skip
    result = run(cfg, run_dir=tmp_path)
    doc = _summary(tmp_path)
    assert doc["precision"] == "bf16-mixed" and result["val/acc"] > 0.8
    assert doc["speed"]["tf32"] and doc["speed"]["cudnn_benchmark"]
    assert doc["speed"]["channels_last"] and doc["speed"]["optimizer_kernel"] == "fused"
    assert doc["data"]["pipeline"] == "memory" and doc["data"]["stored_on"].startswith("cuda")


def test_resident_pipeline_lives_on_the_gpu_and_a_step_never_syncs():
    device = torch.device("cuda")
    speed.apply_backend_flags(tf32=True, cudnn_benchmark=True, device=device)
    cfg = DataConfig(name="fake", num_samples=512, image_shape=[3, 32, 32], augment="standard")
    data = build_data(
        cfg, channels=3, size=32, seed=0, placement=Placement(device=device, pin_memory=True)
    )
    assert data.train.images.is_cuda and data.train.images.dtype == torch.uint8
    model = torchvision.models.resnet18(num_classes=10).to(device)
    assert speed.maybe_channels_last(model, "auto", device)
    data.set_memory_format(torch.channels_last)
    optimizer, scaler = build_optimizer(OptimizerConfig(), model), grad_scaler("bf16-mixed", device)
    ema, sums = WeightAverage(model, 0.999), loop._RunningSums({}, device)

    def step(x, y):
        rules = loop.StepRules(device, torch.bfloat16, grad_clip=1.0, label_smoothing=0.1)
        return loop.train_step(model, optimizer, scaler, x, y, rules)

    data.set_epoch(0)
    batches = data.train.iterate(0)
    x, y = next(batches)  # the epoch's order: one host-to-device copy
    assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    step(x, y)  # warm-up: cuDNN's benchmark, the optimizer's state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host-device sync now raises
    try:
        for k, (x, y) in zip(range(4), batches, strict=False):
            loss, logits = step(x, y)
            sums.add(loss, logits, y)
            ema.update(k + 2)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert sums.fold()["count"] == 4 * 64


@pytest.mark.slow
def test_ddp_on_two_gpus_matches_one(cfg_factory, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    from tests.hardware.test_ddp import assert_close, torchrun

    args = ["compile=off", "logger=none", "trainer.max_epochs=2", "data.batch_size=128"]
    single = run(cfg_factory(*args, "trainer.device=cuda"), run_dir=tmp_path / "one")
    done = torchrun(*args, f"hydra.run.dir={tmp_path / 'two'}", nproc=2, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = _summary(tmp_path / "two")
    assert doc["world_size"] == 2 and doc["device"] == "cuda:0"
    assert doc["data"]["stored_on"] == "cuda:0"  # each rank keeps the set on its own GPU
    assert_close(doc["metrics"], single)
