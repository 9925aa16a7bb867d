"""Compile telemetry: graphs, graph breaks and recompilations with their reasons, compile
seconds and cache hits, as Dynamo and Inductor counted them; the recompile-limit watch."""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from torch import nn

from trainer.compiling import torch_private
from trainer.errors import TrainerError

log = logging.getLogger(__name__)


class CompileError(TrainerError, RuntimeError):
    """Compilation stopped the run (recompile limit with compile.fail_on_recompile_limit)."""

    exit_code = 1


class _LimitWatcher(logging.Handler):
    """Catches Dynamo's 'hit config.recompile_limit' warning, which goes to a quiet logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "recompile_limit" in message:
            self.messages.append(message)
            log.warning("RECOMPILE LIMIT HIT: Dynamo stops compiling this code.\n%s", message)


_watcher = _LimitWatcher()


def watch_recompile_limit() -> None:
    logger = logging.getLogger(torch_private.RECOMPILE_LIMIT_LOGGER)
    if _watcher not in logger.handlers:
        logger.addHandler(_watcher)


def raise_if_limit_error(err: BaseException) -> None:
    """Turn torch's FailOnRecompileLimitHit into a CompileError that says why."""
    if torch_private.is_recompile_limit_error(err):
        last = compile_stats()["recompile_reasons"][-1:] or ["unknown"]
        raise CompileError(
            "Dynamo's recompile limit was hit and compile.fail_on_recompile_limit=true; last "
            f"reason: {last[0]}. Keep the guarded state (shapes, module attributes) fixed, or "
            "set compile.fail_on_recompile_limit=false to continue eagerly for that code."
        ) from err


def fullgraph_error(err: BaseException, what: str) -> None:
    """Under compile.fullgraph a graph break is an error, whatever compiled it: say so."""
    if torch_private.is_graph_break_error(err):
        reason = str(err).strip().splitlines()[0][:300]
        raise CompileError(
            f"compile.fullgraph=true but {what} has a graph break: {reason}. Set "
            "compile.fullgraph=false (Dynamo then splits the graph), or change that code so "
            "Dynamo can trace it."
        ) from None


def reset() -> None:
    """Forget compiled code and counters (each job of a multirun starts clean)."""
    torch.compiler.reset()
    torch_private.clear_statistics()
    _watcher.messages.clear()


def _split_recompiles(reasons: list[str]) -> tuple[list[str], int]:
    """Separate the one expected recompile per frame (the evaluation graph: grad mode or
    `training` changed) from the rest, which are surprises."""
    surprises, seen = [], set()
    for reason in reasons:
        frame = reason.split("/", 1)[0]
        if frame not in seen and re.search(r"grad_mode|\.training\b", reason.splitlines()[0]):
            seen.add(frame)
        else:
            surprises.append(reason)
    return surprises, len(seen)


def compile_stats() -> dict[str, Any]:
    """Graphs, breaks, recompilations (with reasons), compile seconds, cache hits and misses and
    CUDA-graph skips, as Dynamo and Inductor counted them in this process since `reset()`."""
    counters, metrics = torch_private.counters(), torch_private.compilation_metrics()
    breaks = dict(counters.get("graph_break", {}))
    recompiles, eval_graphs = _split_recompiles(
        [m.recompile_reason for m in metrics if m.recompile_reason]
    )
    skips = [m.cudagraph_skip_reason for m in metrics if m.cudagraph_skip_reason]
    inductor, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": {str(k)[:300]: int(v) for k, v in breaks.items()},
        "eval_graphs": eval_graphs,
        "recompiles": len(recompiles),
        "recompile_reasons": [r.splitlines()[0][:300] for r in recompiles],
        "recompile_limit_hit": bool(_watcher.messages),
        "dynamo_compile_s": sum(m.entire_frame_compile_time_s or 0.0 for m in metrics),
        "fxgraph_cache_hit": int(inductor.get("fxgraph_cache_hit", 0)),
        "fxgraph_cache_miss": int(inductor.get("fxgraph_cache_miss", 0)),
        "fxgraph_cache_bypass": int(inductor.get("fxgraph_cache_bypass", 0)),
        "aot_autograd_cache_hit": int(aot.get("autograd_cache_hit", 0)),
        "aot_autograd_cache_miss": int(aot.get("autograd_cache_miss", 0)),
        "aot_autograd_cache_bypass": int(aot.get("autograd_cache_bypass", 0)),
        "cudagraph_skips": int(inductor.get("cudagraph_skips", 0)),
        "autotuned_ops": int(inductor.get("select_algorithm_autotune", 0)),  # max-autotune's
        "cudagraph_skip_reasons": sorted(set(skips)),
    }


def summary_for_tracker(section: dict[str, Any]) -> dict[str, Any]:
    """The summary's `compile` section as flat W&B summary keys (`compile/graphs`, ...)."""
    flat: dict[str, Any] = {}
    for key, value in section.items():
        if key in ("auto", "cache") and isinstance(value, dict):
            flat.update({f"compile/{key}/{k}": v for k, v in value.items()})
        elif key == "graph_break_reasons":
            flat["compile/graph_break_reasons"] = [f"{n}x {r}" for r, n in value.items()]
        elif value is not None and not isinstance(value, dict):
            flat[f"compile/{key}"] = value
    return flat


def is_compiled(model: nn.Module) -> bool:
    return (
        getattr(model, "_compiled_call_impl", None) is not None
        or torch_private.is_optimized_module(model)
        or any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())
    )
