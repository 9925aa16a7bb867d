"""`compile.warm_only=true`: compile what the run would compile (one training step with the
very step function training runs, one evaluation batch as evaluation pads it) into the cache
and the bundle, train nothing, write a summary that says so. hydra.sweeper.prewarm runs this."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from trainer.compiling import compile_stats
from trainer.config.schema import TrainConfig, TrainerConfig
from trainer.data.plan import DataBundle
from trainer.hardware.devices import sync
from trainer.outputs.layout import RunLayout
from trainer.outputs.summary import RunSummary, run_paths
from trainer.train.checkpoint import TrainState
from trainer.train.step import StepRules, evaluate, train_step

log = logging.getLogger(__name__)


def warm_only(
    conf: TrainConfig,
    state: TrainState,
    data: DataBundle,
    layout: RunLayout,
    close_cache: Callable[[dict[str, Any], Any], dict[str, Any] | None],
    *,
    workload: str,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict[str, Any]:
    """Compile one training step and one evaluation batch of `workload`, close the cache; its
    summary.json (status `prewarmed`) says what the bundle gained. Returns {"best": None, ...}."""
    t = conf.trainer
    start = time.perf_counter()
    _one_step_each(state, data, t, device=device, dtype=dtype)
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
        paths=run_paths(layout, wandb_run_dir=None, wandb_run_id=None),
        config=state.config,
    )
    summary.compile["cache"] = report = close_cache(stats, None) or {}
    summary.write(layout.summary)
    hits = stats["fxgraph_cache_hit"] + stats["aot_autograd_cache_hit"]
    misses = stats["fxgraph_cache_miss"] + stats["aot_autograd_cache_miss"]
    print(
        f"warm_only: {workload}: compiled in {seconds:.1f} s ({hits} cache hit(s), {misses} "
        f"miss(es)); {report.get('pushed', 0)} file(s) added to the bundle",
        flush=True,
    )
    return {"best": None, "compile_s": seconds}


def _one_step_each(state: TrainState, data: DataBundle, t: TrainerConfig, **where: Any) -> None:
    """One training step and one evaluation batch: the very graphs training compiles."""
    x, y = next(iter(data.train))
    state.model.train()
    device, dtype = where["device"], where["dtype"]
    train_step(
        state.model,
        state.optimizer,
        state.scaler,
        x.to(device),
        y.to(device),
        StepRules(device, dtype, t.grad_clip, t.label_smoothing),
    )
    first = list(itertools.islice(iter(data.val), 1))  # padded, as evaluation pads it
    evaluate(state.model, first, device=device, dtype=dtype, batch_size=data.eval_batch_size)
    sync(device)
