"""`compile.warm_only=true`: compile what the run would compile (one training step with the
very step function training runs, one evaluation batch as evaluation pads it) into the cache
and the bundle, train nothing, write a summary that says so. hydra.sweeper.prewarm runs this."""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import asdict
from typing import Any

import torch

from trainer.cache.session import CacheSession, close_session
from trainer.cache.workload import label
from trainer.checkpoint import TrainState
from trainer.compiling import compile_stats
from trainer.config import TrainConfig
from trainer.data import DataBundle
from trainer.devices import sync
from trainer.loop import evaluate, train_step
from trainer.summary import RunSummary, run_paths

log = logging.getLogger(__name__)


def warm_only(
    conf: TrainConfig,
    state: TrainState,
    data: DataBundle,
    cache: CacheSession,
    *,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict[str, Any]:
    """Compile one training step and one evaluation batch; summary.json (status `prewarmed`)
    holds the compile figures and what the bundle gained. Returns {"best": None, ...}."""
    t = conf.trainer
    start = time.perf_counter()
    x, y = next(iter(data.train))
    state.model.train()
    train_step(
        state.model,
        state.optimizer,
        state.scaler,
        x.to(device),
        y.to(device),
        device=device,
        dtype=dtype,
        grad_clip=t.grad_clip,
        label_smoothing=t.label_smoothing,  # the very graph training compiles
    )
    first = list(itertools.islice(iter(data.val), 1))  # padded, as evaluation pads it
    evaluate(state.model, first, device=device, dtype=dtype, batch_size=data.eval_batch_size)
    sync(device)
    seconds = time.perf_counter() - start
    stats = compile_stats()
    summary = RunSummary(
        status="prewarmed",
        epochs_completed=0,
        steps=1,
        metrics={},
        best={"name": t.monitor, "value": None, "epoch": None, "mode": t.monitor_mode},
        perf={"compile_s": seconds, "wall_s": seconds},
        compile={**asdict(conf.compile), "enabled": True, **stats, "cache": None},
        device=str(device),
        strategy=t.strategy,
        world_size=1,
        precision=t.precision,
        cpu={},
        torch=torch.__version__,
        paths=run_paths(cache.layout, wandb_run_dir=None, wandb_run_id=None),
        config=state.config,
    )
    summary.compile["cache"] = report = close_session(cache, stats) or {}
    summary.write(cache.layout.summary)
    hits = stats["fxgraph_cache_hit"] + stats["aot_autograd_cache_hit"]
    misses = stats["fxgraph_cache_miss"] + stats["aot_autograd_cache_miss"]
    print(
        f"warm_only: {label(cache.work) if cache.work else conf.model.name}: compiled in "
        f"{seconds:.1f} s ({hits} cache hit(s), {misses} miss(es)); "
        f"{report.get('pushed', 0)} file(s) added to the bundle",
        flush=True,
    )
    return {"best": None, "compile_s": seconds}
