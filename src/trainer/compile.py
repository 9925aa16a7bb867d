"""torch.compile for the trainer: knobs checked before torch sees them, hardware checks,
`apply_compile` (whole model or repeated blocks, in place, so state_dict keys stay clean), a
compiled optimizer step, and `compile_stats` telemetry read from Dynamo's own counters."""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.config import CompileConfig, ConfigError
from trainer.errors import TrainerError

log = logging.getLogger(__name__)

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes that turn on CUDA graphs
_RECOMPILE_LIMIT_LOGGER = "torch._dynamo.convert_frame"


class CompileError(TrainerError, RuntimeError):
    """Compilation stopped the run (recompile limit with compile.fail_on_recompile_limit)."""

    exit_code = 1


def valid_modes() -> list[str]:
    import torch._inductor

    return list(torch._inductor.list_mode_options())


def valid_backends() -> list[str]:
    import torch._dynamo

    return sorted(torch._dynamo.list_backends(exclude_tags=()))


def check_config(cfg: CompileConfig) -> None:
    """Reject an unknown mode, backend or backend module in our own words, before torch."""
    if cfg.backend_module:
        try:
            importlib.import_module(cfg.backend_module)
        except ImportError as err:
            raise ConfigError(
                f"compile.backend_module={cfg.backend_module} cannot be imported ({err}); "
                "give an importable module name that registers the backend, or drop the key."
            ) from None
    backends = valid_backends()
    if cfg.backend not in backends:
        raise ConfigError(
            f"compile.backend={cfg.backend!r} is not a registered torch.compile backend; choose "
            f"one of {', '.join(backends)}, or name the module that registers it in "
            "compile.backend_module."
        )
    modes = valid_modes()
    if cfg.mode not in (None, *modes):
        raise ConfigError(
            f"compile.mode={cfg.mode!r} is not a torch.compile mode; choose one of "
            f"{', '.join(modes)}."
        )


def _has_cxx_compiler() -> bool:
    names = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    return any(name and shutil.which(name) for name in names)


def check_hardware(cfg: CompileConfig, device: torch.device) -> list[str]:
    """Errors for setups Inductor cannot compile for; returns notes about what will happen."""
    notes: list[str] = []
    if cfg.backend == "inductor" and device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major < 7:
            raise ConfigError(
                f"compile.backend=inductor generates Triton kernels, which need a GPU of compute "
                f"capability 7.0 or newer; {torch.cuda.get_device_name(device)} has {major}.{minor}. "
                "Use compile.backend=aot_eager (or cudagraphs), or compile=off."
            )
    if cfg.backend == "inductor" and device.type == "cpu" and not _has_cxx_compiler():
        raise ConfigError(
            "compile.backend=inductor on the CPU generates C++ and needs a C++ compiler, but none "
            "was found (CXX, c++, g++, clang++). Install one (e.g. apt install g++), or use "
            "compile.backend=aot_eager, or compile=off."
        )
    if cfg.mode in CUDA_GRAPH_MODES and device.type != "cuda":
        notes.append(
            f"compile.mode={cfg.mode} uses CUDA graphs, which need a CUDA device; on "
            f"{device.type} torch compiles without them. Choose compile.mode="
            f"{'max-autotune-no-cudagraphs' if cfg.mode == 'max-autotune' else 'default'} "
            "to say so explicitly."
        )
    for note in notes:
        log.warning(note)
    return notes


def configure_cache(cfg: CompileConfig) -> Path | None:
    """Point Inductor's FX-graph and AOTAutograd caches (and Triton's) at `compile.cache_dir`.

    Must run before anything is compiled; subprocesses (sweep trials) inherit the variables.
    """
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    if not cfg.cache_dir:
        return None
    root = Path(cfg.cache_dir).expanduser().resolve()
    (root / "inductor").mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    return root


def _kwargs(cfg: CompileConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "backend": cfg.backend,
        "fullgraph": cfg.fullgraph,
        "dynamic": cfg.dynamic,
    }
    if cfg.options:
        kwargs["options"] = dict(cfg.options)
    elif cfg.backend == "inductor":
        kwargs["mode"] = cfg.mode
    return kwargs


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """Blocks to compile regionally: children of an nn.Sequential/nn.ModuleList whose class
    occurs at least twice there and that hold submodules (ResNet BasicBlocks, ViT encoder
    layers). The outermost such blocks win."""
    found: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        if isinstance(module, nn.Sequential | nn.ModuleList):
            kinds = Counter(type(child) for child in module.children())
            picked = [
                child
                for child in module.children()
                if kinds[type(child)] >= 2 and next(child.children(), None) is not None
            ]
            if picked:
                found.extend(picked)
                rest = [child for child in module.children() if child not in picked]
                for child in rest:
                    visit(child)
                return
        for child in module.children():
            visit(child)

    visit(model)
    return found


def explain(model: nn.Module, example: torch.Tensor) -> Any:
    """Dynamo's explanation (graphs, breaks, reasons) of one forward pass, traced on a copy of
    `model` with the RNG forked, so training (BatchNorm statistics, dropout draws) is unchanged."""
    import copy

    import torch._dynamo

    devices = [example.device] if example.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return torch._dynamo.explain(copy.deepcopy(model))(example)


def describe(result: Any) -> str:
    """Dynamo's explanation without its guard dump: graphs, breaks with reasons and places."""
    lines = [
        f"Graph Count: {result.graph_count}",
        f"Graph Break Count: {result.graph_break_count}",
        f"Op Count: {result.op_count}",
    ]
    for i, b in enumerate(result.break_reasons, 1):
        where = f" at {b.user_stack[-1].filename}:{b.user_stack[-1].lineno}" if b.user_stack else ""
        lines.append(f"Break {i}: {b.reason.splitlines()[0]}{where}")
    for i, ops in enumerate(result.ops_per_graph or [], 1):
        lines.append(f"Graph {i}: {len(ops)} ops")
    return "\n".join(lines)


def _check_fullgraph(model: nn.Module, example: torch.Tensor) -> None:
    result = explain(model, example)
    reset()
    if result.graph_break_count:
        where = "; ".join(
            f"{b.reason.splitlines()[0][:200]} at "
            + (f"{b.user_stack[-1].filename}:{b.user_stack[-1].lineno}" if b.user_stack else "?")
            for b in result.break_reasons[:3]
        )
        raise ConfigError(
            f"compile.fullgraph=true but {type(model).__name__} has {result.graph_break_count} "
            f"graph break(s): {where}. Set compile.fullgraph=false (Dynamo then splits the graph), "
            "try compile.target=blocks, or change that code so Dynamo can trace it."
        )


def apply_compile(
    model: nn.Module,
    *,
    compile_config: CompileConfig,
    device: torch.device | None = None,
    example: torch.Tensor | None = None,
) -> nn.Module:
    """Compile `model` in place (whole model or its repeated blocks) with every knob of the
    `compile` group; `example` (one input batch) enables compile.explain and the fullgraph check."""
    cfg = compile_config
    if cfg.disable:
        return model
    configure_cache(cfg)
    check_config(cfg)
    check_hardware(cfg, device or next(model.parameters()).device)
    import torch._dynamo

    torch._dynamo.config.fail_on_recompile_limit_hit = cfg.fail_on_recompile_limit
    watch_recompile_limit()
    if example is not None and cfg.explain:
        print(describe(explain(model, example)))
        reset()
    if example is not None and cfg.fullgraph and cfg.target == "model":
        _check_fullgraph(model, example)
    kwargs = _kwargs(cfg)
    blocks = repeated_blocks(model) if cfg.target == "blocks" else []
    if cfg.target == "blocks" and not blocks:
        log.warning(
            "compile.target=blocks: %s has no repeated blocks; compiling the whole model",
            type(model).__name__,
        )
    for block in blocks:
        block.compile(**kwargs)
    if not blocks:
        model.compile(**kwargs)
    log.info(
        "compiled %s (%s) with %s",
        type(model).__name__,
        f"{len(blocks)} blocks" if blocks else "whole model",
        kwargs,
    )
    return model


def maybe_compile_optimizer(optimizer: torch.optim.Optimizer, cfg: CompileConfig) -> bool:
    """With compile.optimizer, make learning rates tensors (a scheduler then changes values,
    not guards: no recompilation) and compile `optimizer.step` in place."""
    if cfg.disable or not cfg.optimizer:
        return False
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]))
    kwargs = {k: v for k, v in _kwargs(cfg).items() if k != "fullgraph"}
    eager_step = optimizer.step
    compiled_step = torch.compile(eager_step, **kwargs)
    calls = [0]

    def step(*args: Any, **kw: Any) -> Any:
        # The first step creates the state (momentum, moments) eagerly: compiling it would
        # guard on the empty state and recompile on the second step.
        calls[0] += 1
        return (eager_step if calls[0] == 1 else compiled_step)(*args, **kw)

    if hasattr(eager_step, "_wrapped_by_lr_sched"):  # keep the scheduler's order check quiet
        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = step  # type: ignore[method-assign]
    return True


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
    logger = logging.getLogger(_RECOMPILE_LIMIT_LOGGER)
    if _watcher not in logger.handlers:
        logger.addHandler(_watcher)


def raise_if_limit_error(err: BaseException) -> None:
    """Turn torch's FailOnRecompileLimitHit into a CompileError that says why."""
    from torch._dynamo.exc import FailOnRecompileLimitHit

    if isinstance(err, FailOnRecompileLimitHit) or isinstance(
        err.__cause__, FailOnRecompileLimitHit
    ):
        last = compile_stats()["recompile_reasons"][-1:] or ["unknown"]
        raise CompileError(
            "Dynamo's recompile limit was hit and compile.fail_on_recompile_limit=true; last "
            f"reason: {last[0]}. Keep the guarded state (shapes, module attributes) fixed, or "
            "set compile.fail_on_recompile_limit=false to continue eagerly for that code."
        ) from err


def reset() -> None:
    """Forget compiled code and counters (each job of a multirun starts clean)."""
    import torch._dynamo
    from torch._dynamo.utils import clear_compilation_metrics

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    clear_compilation_metrics()
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
    from torch._dynamo.utils import counters, get_compilation_metrics

    metrics = get_compilation_metrics()
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
        "cudagraph_skip_reasons": sorted(set(skips)),
    }


def summary_for_tracker(section: dict[str, Any]) -> dict[str, Any]:
    """The summary's `compile` section as flat W&B summary keys (`compile/graphs`, ...)."""
    flat: dict[str, Any] = {}
    for key, value in section.items():
        if key == "auto" and isinstance(value, dict):
            flat.update({f"compile/auto/{k}": v for k, v in value.items()})
        elif key == "graph_break_reasons":
            flat["compile/graph_break_reasons"] = [f"{n}x {r}" for r, n in value.items()]
        elif value is not None and not isinstance(value, dict):
            flat[f"compile/{key}"] = value
    return flat


def is_compiled(model: nn.Module) -> bool:
    return (
        getattr(model, "_compiled_call_impl", None) is not None
        or isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
        or any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())
    )
