"""Shared fixtures: configs composed the way `python -m trainer` composes them, isolated output
folders, offline W&B, and one compile cache shared by every test (only the first compile is cold)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from trainer.config.hydra_version import VERSION_BASE

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# One persistent compile cache for the whole test session (and across sessions).
CACHE = Path(
    os.environ.get("TRAINER_TEST_CACHE", Path.home() / ".cache" / "compiled-trainer-tests")
)

os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("WANDB_DISABLE_GIT", "true")
os.environ["TRAINER_CACHE_DIR"] = str(CACHE)
os.environ.pop("WANDB_SWEEP_PARAM_PATH", None)

# Fast settings for tests that are not about the model or compile; on the CPU, also on a GPU
# host (the bit-exact resume tests assume it).
FAST = ["compile=off", "logger=none", "trainer.max_epochs=2", "trainer.device=cpu"]


def make_cfg(*overrides: str) -> DictConfig:
    """Compose conf/train.yaml with overrides, as the command line would."""
    with initialize_config_dir(config_dir=str(CONF), **VERSION_BASE):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


@pytest.fixture
def cfg_factory():
    return make_cfg


@pytest.fixture(autouse=True)
def _isolated_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINER_OUTPUT_DIR", str(tmp_path / "outputs"))
    # An in-process run sizes its children's thread pools through the environment
    # (OMP_NUM_THREADS, ...): restore it, so no test's setting reaches another's subprocesses.
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    # wandb keeps a global run; make sure no test leaks one into the next.
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.run.finish()


@pytest.fixture(scope="session")
def slurm_cluster() -> dict:
    """The SLURM cluster this machine reaches (`.ci/slurm` starts a one-node one): its default
    partition and a node that takes jobs, as {"partition": ..., "node": ...}; skips without one."""
    try:
        listed = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%P %N %t"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
    except (OSError, subprocess.TimeoutExpired):
        listed = []
    rows = [line.split() for line in listed]
    usable = [row for row in rows if len(row) == 3 and row[2] in ("idle", "mix", "alloc")]
    usable.sort(key=lambda row: not row[0].endswith("*"))  # the default partition first
    if not usable:
        pytest.skip("no SLURM cluster running: start one with `bash .ci/slurm` (root)")
    return {"partition": usable[0][0].rstrip("*"), "node": usable[0][1]}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
    """Run `python -m trainer ARGS` as a real process; return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (processes, sweeps, Inductor compiles): what CI runs",
    )


def pytest_collection_modifyitems(config, items):
    """Without --slow, deselect the tests marked slow (the fast set: `python -m pytest`); skip
    the tests marked gpu where torch sees no CUDA device."""
    if not config.getoption("--slow"):
        slow = [item for item in items if "slow" in item.keywords]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if "slow" not in item.keywords]
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
