"""`compile=auto`: time a few eager and compiled training steps on a copy of the model, estimate
the planned run both ways (compile cost included, as the cache state makes it) and keep the
faster. `train_step` and `timed_steps` are the measuring primitives the benchmarks reuse."""

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


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Forward, cross-entropy, backward, optimizer step: the work of one training step."""
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def _train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable, device: torch.device
) -> Callable[[], None]:
    source = itertools.cycle(list(batches))

    def step() -> None:
        x, y = next(source)
        train_step(model, optimizer, x.to(device), y.to(device))

    return step


@torch.no_grad()
def _eval_compile_s(
    eager: nn.Module, compiled: nn.Module, x: torch.Tensor, device: torch.device
) -> float:
    """What compiling the evaluation graph costs: first compiled eval call minus an eager one."""
    eager.eval(), compiled.eval()
    timed_steps(lambda: eager(x), 1, device)  # warm-up
    plain = min(timed_steps(lambda: eager(x), 2, device))
    return max(timed_steps(lambda: compiled(x), 1, device)[0] - plain, 0.0)


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
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        batches = list(itertools.islice(iter(loader), n + 1))  # iter() draws a seed: keep it inside
        eager = copy.deepcopy(model).train()
        eager_step = _train_step(eager, make_optimizer(eager), batches, device)
        compiled = copy.deepcopy(model).train()
        optimizer = make_optimizer(compiled)
        stats_before = compiling.compile_stats()
        compiling.apply_compile(compiled, compile_config=cfg, device=device)
        compiling.maybe_compile_optimizer(optimizer, cfg)
        compiled_step = _train_step(compiled, optimizer, batches, device)
        timed_steps(eager_step, 1, device)  # warm-up
        first = timed_steps(compiled_step, 2, device)  # compiles (a compiled optimizer: twice)
        # Alternate the two so that a busy machine slows both alike; the fastest step of each
        # is the least disturbed estimate.
        eager_s, compiled_s = [], []
        for _ in range(n):
            eager_s += timed_steps(eager_step, 1, device)
            compiled_s += timed_steps(compiled_step, 1, device)
        eval_compile_s = _eval_compile_s(eager, compiled, batches[0][0].to(device), device)
        stats = compiling.compile_stats()
    compiling.reset()
    eager_step_s, compiled_step_s = min(eager_s), min(compiled_s)
    compile_cost_s = max(sum(first) - 2 * compiled_step_s, 0.0) + eval_compile_s
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
