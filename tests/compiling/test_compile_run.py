"""Compiled runs end to end: graph counts over a standard run, the compiled optimizer under a
scheduler, the persistent cache across processes (CUDA-only modes: test_gpu.py; compile=auto's
run: tests/train/test_compile_auto.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from trainer.run import run

pytestmark = pytest.mark.slow  # every test here starts processes or compiles


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.pyversion  # Dynamo traces this interpreter's bytecode
def test_standard_run_compiles_one_train_and_one_eval_graph(cfg_factory, tmp_path):
    # digits: 1437 training and 360 validation samples, neither a multiple of 64.
    cfg = cfg_factory("logger=none", "trainer.max_epochs=2", "compile.backend=aot_eager")
    run(cfg, run_dir=tmp_path)
    comp = _summary(tmp_path)["compile"]
    assert comp["enabled"] and comp["graphs"] == 2 and comp["eval_graphs"] == 1
    assert comp["recompiles"] == 0 and comp["recompile_reasons"] == []
    assert comp["graph_breaks"] == 0 and not comp["recompile_limit_hit"]
    assert comp["dynamo_compile_s"] > 0
    assert any("cache_hit" in k for k in comp) and any("cache_miss" in k for k in comp)


def test_compiled_optimizer_under_a_scheduler_never_recompiles(cfg_factory, tmp_path):
    cfg = cfg_factory(
        "logger=none",
        "trainer.max_epochs=2",
        "compile.backend=aot_eager",
        "compile.optimizer=true",
        "scheduler=step",
        "scheduler.step_size=1",
    )
    result = run(cfg, run_dir=tmp_path)
    comp = _summary(tmp_path)["compile"]
    assert comp["recompiles"] == 0 and comp["graphs"] > 2  # model graphs + optimizer graphs
    assert isinstance(result["train/lr"], float) and result["train/lr"] == pytest.approx(0.005)


def test_unknown_mode_exits_2_listing_the_valid_modes(tmp_path):
    proc = run_cli("logger=none", "compile.mode=turbo", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "compile.mode='turbo'" in proc.stderr and "max-autotune" in proc.stderr


@pytest.mark.pyversion  # the cache key holds the Python version
def test_second_process_hits_the_persistent_cache(tmp_path, record_property):
    """Inductor on a tiny model, twice, in fresh processes sharing a fresh cache directory."""
    env = {"TRAINER_CACHE_DIR": str(tmp_path / "cache")}
    docs = []
    for name in ("cold", "warm"):
        proc = run_cli(
            "logger=none",
            "trainer.max_epochs=1",
            f"hydra.run.dir={tmp_path / name}",
            cwd=tmp_path,
            env=env,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        docs.append(_summary(tmp_path / name))
    cold, warm = (d["compile"] for d in docs)
    assert cold["fxgraph_cache_miss"] > 0 and cold["cache_dir"] == str(tmp_path / "cache")
    assert warm["fxgraph_cache_miss"] == 0 and warm["aot_autograd_cache_miss"] == 0
    assert warm["fxgraph_cache_hit"] + warm["aot_autograd_cache_hit"] > 0
    ratio = docs[0]["perf"]["compile_s"] / max(docs[1]["perf"]["compile_s"], 1e-9)
    record_property("cold_over_warm_compile_s", ratio)  # recorded, never asserted
    print(f"cold/warm first-step compile time: {ratio:.1f}x")
