"""trainer.strategy=ddp under a real torchrun on CPU (Gloo, 2 processes): same metrics as one
process with the same global batch, checkpoints that cross world sizes, rank-0-only outputs and
an agreed stop on SIGTERM. Multi-GPU checks are marked `gpu`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, make_cfg
from trainer.config.schema import ConfigError, DataConfig
from trainer.data.plan import Placement, build_data
from trainer.run import run
from trainer.train.models import SmallCNN

EAGER = ["compile=off", "logger=none", "trainer.device=cpu"]  # Gloo on the CPU, also on a GPU host
# One rank's batch-norm statistics come from half the global batch, so the runs are close,
# not equal; a wrong sharding (every rank on all data, batches not divided) misses by far more.
TOLERANCE = {"train/acc": 0.03, "val/acc": 0.03, "train/loss": 0.06, "val/loss": 0.06}


def torchrun(*args: str, nproc: int = 2, env: dict | None = None, timeout: float = 180):
    """`torchrun --standalone --nproc_per_node=N -m trainer trainer.strategy=ddp ARGS`."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={nproc}", "-m", "trainer", "trainer.strategy=ddp", *args]
    return subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_close(ddp: dict, single: dict) -> None:
    for key, tol in TOLERANCE.items():
        assert abs(ddp[key] - single[key]) <= tol, (key, ddp[key], single[key])


def final_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())["metrics"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One-process reference runs of 1 and 2 epochs, and the run dir of the 1-epoch run."""
    root = tmp_path_factory.mktemp("single")
    one = run(make_cfg(*EAGER, "trainer.max_epochs=1"), run_dir=root / "one")
    two = run(make_cfg(*EAGER, "trainer.max_epochs=2"), run_dir=root / "two")
    return {"one": one, "two": two, "one_dir": root / "one"}


def test_global_batches_hold_the_same_samples_at_any_world_size():
    cfg = DataConfig(batch_size=64)
    kwargs = {"channels": None, "size": None, "seed": 3}
    one = build_data(cfg, **kwargs)
    ranks = [build_data(cfg, **kwargs, placement=Placement(rank=r, world_size=2)) for r in range(2)]
    for bundle in (one, *ranks):
        bundle.set_epoch(1)
    for whole, *parts in zip(one.train, *(b.train for b in ranks), strict=True):
        merged = torch.cat([p[1] for p in parts])
        assert sorted(merged.tolist()) == sorted(whole[1].tolist())
        assert sum(p[0].shape[0] for p in parts) == whole[0].shape[0] == 64
    val = [sum(len(y) for _, y in b.val) for b in ranks]
    assert sum(val) == one.val.num_samples and ranks[0].eval_batch_size == 32


def test_batch_must_divide_among_ranks():
    with pytest.raises(ConfigError, match="data.batch_size=63.*multiple of 2"):
        build_data(
            DataConfig(batch_size=63),
            channels=None,
            size=None,
            seed=0,
            placement=Placement(world_size=2),
        )


def test_ddp_outside_torchrun_is_a_config_error(tmp_path, monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="torchrun"):
        run(make_cfg(*EAGER, "trainer.strategy=ddp"), run_dir=tmp_path)


@pytest.mark.slow
def test_torchrun_without_ddp_is_one_message_and_no_run_dir(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*command, "-m", "trainer", *EAGER],
        cwd=tmp_path,
        env={**os.environ, "TRAINER_OUTPUT_DIR": str(tmp_path / "out")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(said) == 1 and "trainer.strategy=ddp" in said[0]  # rank 0 only
    assert "FileNotFoundError" not in proc.stderr and "Error executing job" not in proc.stderr
    assert "/trainer/" not in proc.stderr  # no traceback through our code
    assert "exitcode  : -15" not in proc.stderr  # rank 1 ended by itself, not by torchrun
    assert not (tmp_path / "out").exists()  # no rank wrote a run directory


@pytest.mark.slow
def test_ddp_matches_single_writes_once_and_resumes_single(single, tmp_path):
    out = tmp_path / "out"
    done = torchrun(
        "compile=off", "trainer.device=cpu", "trainer.max_epochs=1",
        env={"TRAINER_OUTPUT_DIR": str(out)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = out.glob("runs/*/*")  # every rank agreed on one run directory
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["strategy"] == "ddp" and summary["world_size"] == 2
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1
    assert len(list(run_dir.glob("wandb/offline-run-*"))) == 1
    assert done.stdout.count("run finished") == 1  # only rank 0 prints
    assert_close(summary["metrics"], single["one"])

    # DDP -> single: clean keys, and a one-process run continues from the DDP checkpoint.
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    SmallCNN(1, 10).load_state_dict(state["model"], strict=True)
    resumed = run(
        make_cfg(*EAGER, "trainer.max_epochs=2", f"trainer.resume={run_dir}/checkpoints/last.pt"),
        run_dir=tmp_path / "single",
    )
    assert_close(resumed, single["two"])


@pytest.mark.slow
def test_single_checkpoint_resumes_under_compiled_ddp(single, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(single["one_dir"], run_dir)  # a one-process run stopped after epoch 1
    done = torchrun(
        "compile.backend=aot_eager",
        "logger=none",
        "trainer.device=cpu",
        "trainer.max_epochs=2",
        "trainer.resume=auto",
        f"hydra.run.dir={run_dir}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 2 and summary["world_size"] == 2
    assert summary["compile"]["enabled"] and summary["compile"]["graphs"] >= 1
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert_close(summary["metrics"], single["two"])
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert not any("_orig_mod" in k or k.startswith("module.") for k in state["model"])


@pytest.mark.slow
def test_sigterm_stops_every_rank_at_the_same_step(tmp_path):
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", "-m", "trainer", "trainer.strategy=ddp", *EAGER]
    command += ["trainer.max_epochs=500", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "metrics.jsonl").is_file() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # what a sweep agent sends to its trial's program
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stops = [line for line in stderr.splitlines() if line.startswith("SIGTERM received")]
    assert len(stops) == 2 and stops[0] == stops[1], stderr[-3000:]  # the same step on both
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert f"step {state['progress']['step']};" in stops[0]


@pytest.mark.slow
@pytest.mark.gpu
def test_ddp_on_every_gpu_with_inductor(tmp_path):
    gpus = torch.cuda.device_count()
    done = torchrun(
        "logger=none",
        "trainer.max_epochs=2",
        f"data.batch_size={64 * gpus}",
        f"hydra.run.dir={tmp_path}",
        nproc=gpus,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["device"] == "cuda:0" and summary["world_size"] == gpus
    assert summary["compile"]["graphs"] >= 1 and summary["metrics"]["val/acc"] > 0.5
