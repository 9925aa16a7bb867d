"""`compile=auto`: time a few eager and compiled training steps on a copy of the model, estimate
the planned run both ways (compile cost included, as the cache state makes it) and keep the
faster. `timed_steps` is the reusable measuring primitive."""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer import compile as compiling
from trainer.config import CompileConfig
from trainer.loop import sync

log = logging.getLogger(__name__)


def timed_steps(step: Callable[[], Any], n: int, device: torch.device) -> list[float]:
    """Seconds of each of `n` calls of `step`, each bracketed by device syncs."""
    times = []
    for _ in range(n):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def _train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable, device: torch.device
) -> Callable[[], None]:
    source = itertools.cycle(list(batches))

    def step() -> None:
        x, y = next(source)
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def decide(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    loader: Iterable,
    *,
    cfg: CompileConfig,
    device: torch.device,
    planned_steps: int,
) -> dict[str, Any]:
    """Measure on a copy of `model` (the real one and the RNG are untouched) and return the
    decision with its figures; the compiled code it leaves behind is forgotten."""
    n = cfg.auto_steps
    batches = list(itertools.islice(iter(loader), n + 1))
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        eager = copy.deepcopy(model).train()
        eager_step = _train_step(eager, make_optimizer(eager), batches, device)
        eager_s = timed_steps(eager_step, n + 1, device)[1:]
        compiled = copy.deepcopy(model).train()
        optimizer = make_optimizer(compiled)
        stats_before = compiling.compile_stats()
        compiling.apply_compile(compiled, compile_config=cfg, device=device)
        compiling.maybe_compile_optimizer(optimizer, cfg)
        compiled_s = timed_steps(_train_step(compiled, optimizer, batches, device), n + 1, device)
        stats = compiling.compile_stats()
    compiling.reset()
    eager_step_s = sorted(eager_s)[len(eager_s) // 2]
    compiled_step_s = sorted(compiled_s[1:])[len(compiled_s[1:]) // 2]
    compile_cost_s = max(compiled_s[0] - compiled_step_s, 0.0)
    eager_total = planned_steps * eager_step_s
    compiled_total = compile_cost_s + planned_steps * compiled_step_s
    hits = sum(v - stats_before.get(k, 0) for k, v in stats.items() if "cache_hit" in k)
    misses = sum(v - stats_before.get(k, 0) for k, v in stats.items() if "cache_miss" in k)
    choice = "compile" if compiled_total < eager_total else "eager"
    report = {
        "decision": choice,
        "planned_steps": planned_steps,
        "eager_step_s": eager_step_s,
        "compiled_step_s": compiled_step_s,
        "compile_cost_s": compile_cost_s,
        "eager_total_s": eager_total,
        "compiled_total_s": compiled_total,
        "speedup": eager_step_s / compiled_step_s if compiled_step_s else 0.0,
        "cache_hits": int(hits),
        "cache_misses": int(misses),
        "cache_state": "warm" if hits and not misses else ("cold" if misses else "n/a"),
    }
    log.warning(
        "compile=auto chose %s: eager %.1f ms/step -> %.1f s; compiled %.1f ms/step + %.1f s "
        "compile (%s cache) -> %.1f s, for %d planned steps",
        choice,
        eager_step_s * 1e3,
        eager_total,
        compiled_step_s * 1e3,
        compile_cost_s,
        report["cache_state"],
        compiled_total,
        planned_steps,
    )
    return report
