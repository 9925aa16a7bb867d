"""The compile-cache bundle in real trial processes (Inductor on small_cnn, digits, the tests'
shared cache where a warm machine is meant): a round trip between two cache dirs shows only
hits, an incompatible bundle is ignored with one notice and the miss says why, a local sweep
with hydra.sweeper.prewarm compiles each distinct architecture once before its trial.
compile.warm_only and compile.trace are checked by their rows of README's compile table
(tests/docs/test_readme.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import CACHE, run_cli
from trainer.cache.entries import cache_files
from trainer.cache.key import key_id

pytestmark = pytest.mark.slow  # every test here starts processes or compiles

SMALL = ("logger=none", "trainer.max_epochs=1", "trainer.max_steps=2")


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _trial(tmp_path: Path, name: str, cache: Path, bundle: Path, *extra: str):
    env = {"TRAINER_CACHE_DIR": str(cache), "TRAINER_CACHE_BUNDLE": str(bundle)}
    proc = run_cli(*SMALL, *extra, f"hydra.run.dir={tmp_path / name}", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, _summary(tmp_path / name)["compile"]


def _misses(comp: dict) -> int:
    return comp["fxgraph_cache_miss"] + comp["aot_autograd_cache_miss"]


def _other_torch(bundle: Path, into: Path) -> None:
    """`bundle` as another torch version would have written it."""
    shutil.copytree(bundle, into)
    part = next(into.iterdir())
    key = {**json.loads((part / "key.json").read_text()), "torch": "0.0.0"}
    (part / "key.json").write_text(json.dumps(key))
    part.rename(part.with_name(key_id(key)))


def test_bundle_round_trip_and_an_incompatible_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    _, first = _trial(tmp_path, "first", CACHE, bundle)  # a machine with a warm cache
    assert first["cache"]["pushed"] > 0 and first["cache"]["bundle"] == str(bundle)

    fresh = tmp_path / "fresh"  # another machine: an empty cache dir and the bundle
    _, second = _trial(tmp_path, "second", fresh, bundle)
    assert _misses(second) == 0 and second["fxgraph_cache_hit"] > 0, second
    assert second["cache"]["pulled"] == first["cache"]["pushed"] == len(cache_files(fresh))
    assert second["cache"]["expected_hit"] and second["cache"]["miss_reason"] is None

    # A bundle of another torch, and a cache dir with the kernels but none of the graphs.
    _other_torch(bundle, tmp_path / "other")
    partial = tmp_path / "partial"
    shutil.copytree(fresh / "inductor", partial / "inductor")
    for graphs in ("fxgraph", "aotautograd"):
        shutil.rmtree(partial / "inductor" / graphs)
    proc, third = _trial(tmp_path, "third", partial, tmp_path / "other")
    output = proc.stdout + proc.stderr
    notices = [line for line in output.splitlines() if "compile cache: ignoring the bundle" in line]
    assert len(notices) == 1 and "torch 0.0.0 there" in notices[0], output[-3000:]
    assert third["cache"]["pulled"] == 0 and _misses(third) > 0
    assert "only for other machines (torch 0.0.0 there" in third["cache"]["miss_reason"]
    assert "cache miss" in proc.stdout  # the summary table says it too


def test_prewarm_compiles_each_distinct_architecture_once_before_the_trials(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        "-m",
        "hydra/sweeper=wandb",
        "hydra.sweeper.method=grid",
        "hydra.sweeper.metric.name=val/acc",
        "model.width=8,16",
        "optimizer.lr=0.1",
        *SMALL,
        "hydra.sweeper.prewarm=true",
        "hydra.sweeper.count=1",  # one trial is enough to see it start warm
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    starts = [line for line in proc.stdout.splitlines() if line.endswith(" ...")]
    assert [s.split(":")[0] for s in starts] == ["prewarm 1/2", "prewarm 2/2"], proc.stdout
    assert proc.stdout.index("prewarm 2/2") < proc.stdout.index("agent: starting run")
    assert "TRAINER_CACHE_BUNDLE" not in proc.stdout  # the bundle keeps trials forkable
    prewarmed = [_summary(d) for d in sorted((sweep / "prewarm").iterdir()) if d.is_dir()]
    assert [d["status"] for d in prewarmed] == ["prewarmed", "prewarmed"]
    widths = sorted(d["config"]["model"]["width"] for d in prewarmed)
    assert widths == [8, 16]
    trials = [_summary(d)["compile"] for d in sorted((sweep / "runs").iterdir())]
    assert len(trials) == 1 and _misses(trials[0]) == 0, trials
    assert trials[0]["cache"]["bundle"] == str((sweep / "compile_cache").resolve())  # the agent's
    records = list((sweep / "compile_cache").glob("*/records/*.json"))
    assert len({json.loads(r.read_text())["workload_id"] for r in records}) == 2
