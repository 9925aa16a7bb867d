"""torch.compile for the trainer: `apply_compile` compiles in place (state_dict keys stay clean)
and `compile_stats` reads Dynamo's counters for the run summary."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.config import CompileConfig

log = logging.getLogger(__name__)


def configure_cache(cfg: CompileConfig) -> Path | None:
    """Point Inductor's and Triton's persistent caches at `compile.cache_dir`.

    Must run before anything is compiled: Inductor reads these variables when it first
    needs its cache directory.
    """
    if not cfg.cache_dir:
        return None
    root = Path(cfg.cache_dir).expanduser().resolve()
    (root / "inductor").mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    return root


def apply_compile(model: nn.Module, *, compile_config: CompileConfig) -> nn.Module:
    """Compile `model`'s forward in place with every knob of the `compile` group."""
    if compile_config.disable:
        return model
    configure_cache(compile_config)
    kwargs: dict[str, Any] = {
        "backend": compile_config.backend,
        "fullgraph": compile_config.fullgraph,
        "dynamic": compile_config.dynamic,
    }
    if compile_config.options:
        kwargs["options"] = dict(compile_config.options)
    else:
        kwargs["mode"] = compile_config.mode
    model.compile(**kwargs)
    log.info("compiled %s with %s", type(model).__name__, kwargs)
    return model


def reset() -> None:
    """Forget compiled code and counters (each job of a multirun starts clean)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


def compile_stats() -> dict[str, Any]:
    """Graphs, graph breaks and their reasons, as Dynamo counted them in this process."""
    from torch._dynamo.utils import counters

    breaks = dict(counters.get("graph_break", {}))
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": {str(k)[:300]: int(v) for k, v in breaks.items()},
    }


def is_compiled(model: nn.Module) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None or isinstance(
        model, torch._dynamo.eval_frame.OptimizedModule
    )
