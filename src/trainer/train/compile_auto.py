"""`compile=auto`: time a few eager and compiled training steps on a copy of the model, with
the very step function training runs (`train/step.py` `train_step`: autocast, GradScaler, clipping),
estimate the planned run both ways (compile cost included, as the cache state makes it) and
keep the faster. `timed_steps` is the measuring primitive the benchmarks reuse."""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainer.compiling.apply import apply_compile, maybe_compile_optimizer
from trainer.compiling.stats import compile_stats, reset
from trainer.config.schema import CompileConfig, TrainerConfig
from trainer.hardware.devices import grad_scaler, sync
from trainer.train.step import StepRules, train_step

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


@dataclass
class StepRecipe:
    """How training steps: the precision rules and clipping `train_step` is called with."""

    device: torch.device
    precision: str = "32"  # trainer.precision (the GradScaler scales under 16-mixed only)
    dtype: torch.dtype | None = None  # autocast dtype (None: fp32)
    grad_clip: float | None = None  # trainer.grad_clip
    label_smoothing: float = 0.0  # trainer.label_smoothing

    def stepper(self, model: nn.Module, optimizer: torch.optim.Optimizer, batches: list):
        """A no-argument callable that trains `model` one step on the next of `batches`."""
        source, scaler = itertools.cycle(batches), grad_scaler(self.precision, self.device)

        def step() -> None:
            x, y = next(source)
            x, y = x.to(self.device), y.to(self.device)
            train_step(
                model,
                optimizer,
                scaler,
                x,
                y,
                StepRules(self.device, self.dtype, self.grad_clip, self.label_smoothing),
            )

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


def _measure(model, make_optimizer, batches, cfg: CompileConfig, recipe: StepRecipe):
    """Step times of an eager and a compiled copy of `model`, alternated, and compile stats."""
    device, n = recipe.device, cfg.auto_steps
    eager = copy.deepcopy(model).train()
    eager_step = recipe.stepper(eager, make_optimizer(eager), batches)
    compiled = copy.deepcopy(model).train()
    optimizer = make_optimizer(compiled)
    before = compile_stats()
    apply_compile(compiled, compile_config=cfg, device=device, trial=True)  # not the run's model
    maybe_compile_optimizer(optimizer, cfg)
    compiled_step = recipe.stepper(compiled, optimizer, batches)
    timed_steps(eager_step, 1, device)  # warm-up
    first = timed_steps(compiled_step, 2, device)  # compiles (a compiled optimizer: twice)
    # Alternate the two so that a busy machine slows both alike; the fastest step of each
    # is the least disturbed estimate.
    eager_s, compiled_s = [], []
    for _ in range(n):
        eager_s += timed_steps(eager_step, 1, device)
        compiled_s += timed_steps(compiled_step, 1, device)
    eval_s = _eval_compile_s(eager, compiled, batches[0][0].to(device), device)
    after = compile_stats()
    hits = sum(v - before.get(k, 0) for k, v in after.items() if "cache_hit" in k)
    misses = sum(v - before.get(k, 0) for k, v in after.items() if "cache_miss" in k)
    return min(eager_s), min(compiled_s), sum(first), eval_s, int(hits), int(misses)


def decide(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    loader: Iterable,
    *,
    cfg: CompileConfig,
    device: torch.device,
    planned_steps: int,
    recipe: StepRecipe | None = None,
) -> dict[str, Any]:
    """Measure on a copy of `model` (the real one and the RNG are untouched) and return the
    decision with its figures; the compiled code it leaves behind is forgotten."""
    recipe = recipe or StepRecipe(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        # iter() draws a seed: keep it inside the forked RNG
        batches = list(itertools.islice(iter(loader), cfg.auto_steps + 1))
        eager_step_s, compiled_step_s, first_s, eval_s, hits, misses = _measure(
            model, make_optimizer, batches, cfg, recipe
        )
    reset()
    compile_cost_s = max(first_s - 2 * compiled_step_s, 0.0) + eval_s
    report = {
        "decision": "eager",
        "planned_steps": planned_steps,
        "eager_step_s": eager_step_s,
        "compiled_step_s": compiled_step_s,
        "compile_cost_s": compile_cost_s,
        "eager_total_s": planned_steps * eager_step_s,
        "compiled_total_s": compile_cost_s + planned_steps * compiled_step_s,
        "speedup": eager_step_s / compiled_step_s if compiled_step_s else 0.0,
        "cache_hits": hits,
        "cache_misses": misses,
        "cache_state": "warm" if hits and not misses else ("cold" if misses else "n/a"),
    }
    if report["compiled_total_s"] < report["eager_total_s"]:
        report["decision"] = "compile"
    _log(report)
    return report


def _log(report: dict[str, Any]) -> None:
    log.info(  # a decision, not a problem
        "compile=auto chose %s: eager %.1f ms/step -> %.1f s; compiled %.1f ms/step + %.1f s "
        "compile (%s cache) -> %.1f s, for %d planned steps",
        report["decision"],
        report["eager_step_s"] * 1e3,
        report["eager_total_s"],
        report["compiled_step_s"] * 1e3,
        report["compile_cost_s"],
        report["cache_state"],
        report["compiled_total_s"],
        report["planned_steps"],
    )


def planned_steps(trainer: TrainerConfig, *, per_epoch: int, done: int) -> int:
    """Optimizer steps the run still has to take (trainer.max_epochs, capped by max_steps)."""
    planned = max(trainer.max_epochs * per_epoch - done, 0)
    if trainer.max_steps is None:
        return planned
    return min(planned, max(trainer.max_steps - done, 0))


def maybe_decide(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    loader: Any,
    *,
    cfg: CompileConfig,
    recipe: StepRecipe,
    planned: int,
) -> dict[str, Any] | None:
    """compile=auto's report, or None when compile.auto is off (or compile=off)."""
    if not cfg.auto or cfg.disable:
        return None
    return decide(
        model,
        make_optimizer,
        loader,
        cfg=cfg,
        device=recipe.device,
        planned_steps=planned,
        recipe=recipe,
    )
