"""`python -m trainer` as a user runs it: clear errors, multirun, SIGTERM and exact resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, make_cfg, run_cli
from trainer.config.schema import ConfigError
from trainer.hardware.devices import resolve_precision
from trainer.run import run


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, key",
    [
        (["model.name=resnt18"], "model.name=resnet18"),
        (["model=resnet1800"], "model"),
        (["trainer.max_epochs=0"], "trainer.max_epochs"),
        (["data.batch_size=-1"], "data.batch_size"),
        (["optimizer.lr=0"], "optimizer.lr"),
        (["trainer.precision=fp4"], "trainer.precision"),
        (["data=cifar10", "data.root=/nonexistent/data"], "data.root"),
        (["trainer.resume=/nonexistent/last.pt"], "trainer.resume"),
    ],
)
def test_bad_input_is_one_clear_paragraph(args, key, tmp_path):
    proc = run_cli("logger=none", "compile=off", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    assert key in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and key in error[0]  # a group option too: ours, not Hydra's


@pytest.mark.slow
@pytest.mark.parametrize(
    "override, key",
    [
        ("compile.options={epilogue_fusoin: true}", "compile.options"),
        ("compile.mode=fast", "compile.mode='fast'"),
    ],
)
def test_compile_typos_exit_2_before_anything_is_built(override, key, tmp_path):
    proc = run_cli("logger=none", override, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and key in error[0]
    assert not (tmp_path / "outputs").exists() or not list((tmp_path / "outputs").rglob("*.pt"))


def test_bf16_where_the_device_cannot(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla T4")
    with pytest.raises(ConfigError, match="trainer.precision=bf16-mixed"):
        resolve_precision("bf16-mixed", torch.device("cuda"))
    assert resolve_precision("bf16-mixed", torch.device("cpu")) is torch.bfloat16


@pytest.mark.slow
def test_a_diverging_run_is_an_outcome_exit_3_without_traceback(tmp_path):
    proc = run_cli(
        "optimizer.lr=1e8", "compile=off", "trainer.max_epochs=1", "logger=none",
        cwd=tmp_path, env={"TRAINER_OUTPUT_DIR": str(tmp_path)}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "Error executing job" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("diverged:")]
    assert len(said) == 1 and "optimizer.lr" in said[0] and "trainer.grad_clip" in said[0]
    (summary,) = tmp_path.glob("runs/*/*/summary.json")
    doc = json.loads(summary.read_text())
    assert doc["status"] == "diverged" and doc["diverged"]["epoch"] == 1


@pytest.mark.slow
def test_multirun_four_jobs_with_own_dirs_and_wandb_runs(tmp_path):
    out = tmp_path / "outputs"
    proc = run_cli(
        "-m",
        "optimizer.lr=0.1,0.01",
        "compile=off,default",
        "trainer.max_epochs=1",
        cwd=tmp_path,
        env={"TRAINER_OUTPUT_DIR": str(out)},
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = sorted(out.glob("multiruns/*/*/*/summary.json"))
    assert len(summaries) == 4
    docs = [json.loads(p.read_text()) for p in summaries]
    assert {(d["config"]["optimizer"]["lr"], d["compile"]["disable"]) for d in docs} == {
        (0.1, True),
        (0.1, False),
        (0.01, True),
        (0.01, False),
    }
    run_ids = {d["paths"]["wandb_run_id"] for d in docs}
    assert len(run_ids) == 4 and None not in run_ids
    assert not list(out.glob("runs/*"))  # single runs and multiruns live in separate trees


def _wait_for(proc: subprocess.Popen, text: str, timeout: float) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}; output: {''.join(seen)[-2000:]}")


@pytest.mark.slow
@pytest.mark.pyversion  # CPython's signal handling mid-step
def test_sigterm_saves_and_resume_matches_uninterrupted(tmp_path):
    args = [
        # small_cnn with batch 4: ~360 cheap steps per epoch, so the signal lands mid-epoch
        "compile=off",
        "data.batch_size=4",
        "trainer.max_epochs=6",
        "trainer.device=cpu",  # bit-exact on the CPU, also on a GPU host
    ]
    run_dir = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", *args, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    _wait_for(proc, "epoch 1/6", timeout=120)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 30
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "trainer.resume=auto" in err and "Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["paths"]["wandb_run_dir"]  # the W&B run was closed, not abandoned
    assert (run_dir / "checkpoints" / "last.pt").is_file()

    resumed = run_cli(*args, f"hydra.run.dir={run_dir}", "trainer.resume=auto", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = json.loads((run_dir / "summary.json").read_text())
    assert final["status"] == "finished" and final["epochs_completed"] == 6

    reference = tmp_path / "reference"
    run(make_cfg(*args, "logger=none"), run_dir=reference)
    a = torch.load(reference / "checkpoints/last.pt", weights_only=False)["model"]
    b = torch.load(run_dir / "checkpoints/last.pt", weights_only=False)["model"]
    for key in a:
        assert torch.equal(a[key], b[key]), key
    ref = json.loads((reference / "summary.json").read_text())
    assert ref["metrics"]["val/acc"] == final["metrics"]["val/acc"]


@pytest.mark.slow
def test_runs_from_any_working_directory(tmp_path):
    proc = run_cli("--cfg", "job", "--resolve", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    assert "small_cnn" in proc.stdout
    assert Path(ROOT / "conf" / "train.yaml").is_file()


@pytest.mark.slow
def test_options_with_a_backend_that_ignores_them_exit_2(tmp_path):
    proc = run_cli("logger=none", "compile.backend=aot_eager",
                   "compile.options={epilogue_fusion: true}", cwd=tmp_path, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "compile.backend=aot_eager ignores them" in error[0]
