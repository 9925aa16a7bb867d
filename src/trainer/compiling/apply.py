"""`apply_compile`: torch.compile with every knob of the `compile` group, on the whole model or
its repeated blocks, in place (state_dict keys stay clean); a compiled optimizer step; the
compile caches."""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.compiling import torch_private
from trainer.compiling.checks import check_config, check_hardware
from trainer.compiling.regional import RegionalCompiler
from trainer.compiling.stats import fullgraph_error, reset, watch_recompile_limit
from trainer.config.schema import CompileConfig, ConfigError

log = logging.getLogger(__name__)


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


def quiet_cuda_home_probe() -> None:
    """Inductor imports torch.utils.cpp_extension to build CPU kernels; on import that module
    looks for a CUDA toolkit and, when one is installed but torch sees no GPU, warns "No CUDA
    runtime is found, using CUDA_HOME=...": true, and irrelevant to a CPU compile. Import it
    once with only that logger at ERROR; its later warnings (real build problems) still show."""
    if "torch.utils.cpp_extension" in sys.modules or torch.cuda.is_available():
        return
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        importlib.import_module("torch.utils.cpp_extension")
    finally:
        logger.setLevel(level)


def compile_kwargs(cfg: CompileConfig) -> dict[str, Any]:
    """torch.compile's keyword arguments for `cfg` (options and mode are exclusive); every
    compile (model, blocks, optimizer) asks for them just before it compiles."""
    torch_private.note_python_3130_guards()
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
    pending = [model]
    while pending:
        module = pending.pop(0)
        picked = []
        if isinstance(module, nn.Sequential | nn.ModuleList):
            kinds = Counter(type(child) for child in module.children())
            picked = [
                child
                for child in module.children()
                if kinds[type(child)] >= 2 and next(child.children(), None) is not None
            ]
        found.extend(picked)
        pending[:0] = [child for child in module.children() if child not in picked]
    return found


def explain(model: nn.Module, example: torch.Tensor) -> Any:
    """Dynamo's explanation (graphs, breaks, reasons) of one forward pass, traced on a copy of
    `model` with the RNG forked, so training (BatchNorm statistics, dropout draws) is unchanged."""
    devices = [example.device] if example.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return torch_private.explain(copy.deepcopy(model))(example)


def _where(b: Any) -> str:
    return f"{b.user_stack[-1].filename}:{b.user_stack[-1].lineno}" if b.user_stack else "?"


def describe(result: Any) -> str:
    """Dynamo's explanation without its guard dump: graphs, breaks with reasons and places."""
    lines = [
        f"Graph Count: {result.graph_count}",
        f"Graph Break Count: {result.graph_break_count}",
        f"Op Count: {result.op_count}",
    ]
    for i, b in enumerate(result.break_reasons, 1):
        where = f" at {_where(b)}" if b.user_stack else ""
        lines.append(f"Break {i}: {b.reason.splitlines()[0]}{where}")
    for i, ops in enumerate(result.ops_per_graph or [], 1):
        lines.append(f"Graph {i}: {len(ops)} ops")
    return "\n".join(lines)


def _check_fullgraph(model: nn.Module, example: torch.Tensor) -> None:
    result = explain(model, example)
    reset()
    if result.graph_break_count:
        where = "; ".join(
            f"{b.reason.splitlines()[0][:200]} at {_where(b)}" for b in result.break_reasons[:3]
        )
        raise ConfigError(
            f"compile.fullgraph=true but {type(model).__name__} has {result.graph_break_count} "
            f"graph break(s): {where}. Set compile.fullgraph=false (Dynamo then splits the graph), "
            "try compile.target=blocks, or change that code so Dynamo can trace it."
        )


def _prepare(cfg: CompileConfig, model: nn.Module, device: torch.device | None, example) -> None:
    configure_cache(cfg)
    check_config(cfg)
    device = device or next(model.parameters()).device
    check_hardware(cfg, device)
    if device.type == "cpu":
        quiet_cuda_home_probe()
    torch_private.set_fail_on_recompile_limit(cfg.fail_on_recompile_limit)
    watch_recompile_limit()
    if example is not None and cfg.explain:
        print(describe(explain(model, example)))
        reset()
    if example is not None and cfg.fullgraph and cfg.target == "model":
        _check_fullgraph(model, example)


def apply_compile(
    model: nn.Module,
    *,
    compile_config: CompileConfig,
    device: torch.device | None = None,
    example: torch.Tensor | None = None,
    trial: bool = False,
) -> nn.Module:
    """Compile `model` in place (whole model or its repeated blocks) with every knob of the
    `compile` group; `example` (one input batch) enables compile.explain and the fullgraph check.
    `trial`: a throwaway copy (compile=auto's measurement), compiled without saying so."""
    cfg = compile_config
    if cfg.disable:
        return model
    _prepare(cfg, model, device, example)
    kwargs = compile_kwargs(cfg)
    blocks = repeated_blocks(model) if cfg.target == "blocks" else []
    if cfg.target == "blocks" and not blocks:
        log.warning(
            "compile.target=blocks: %s has no repeated blocks; compiling the whole model",
            type(model).__name__,
        )
    regional = RegionalCompiler(kwargs)
    for block in blocks:
        regional.attach(block)  # each distinct block compiled once: no recompiles
    if not blocks:
        model.compile(**kwargs)
    log.log(
        logging.DEBUG if trial else logging.INFO,
        "compiled %s (%s) with %s",
        type(model).__name__,
        f"{len(blocks)} blocks" if blocks else "whole model",
        kwargs,
    )
    return model


class _CompiledStep:
    """optimizer.step with the update itself compiled. The first call runs eagerly (it creates
    the state: momentum, moments; compiling it would guard on the empty state and recompile on
    the second step), then compiles the update on that state and undoes it, so the compile
    falls in the first step, where perf.compile_s counts it. torch's step wrapper (a profiler
    range and a deliberate graph break around no_grad) stays outside the graph: the compiled
    update is the undecorated step, called under no_grad; step hooks still run, eagerly."""

    def __init__(self, optimizer: torch.optim.Optimizer, kwargs: dict[str, Any]) -> None:
        self.optimizer, self.eager, self.calls = optimizer, optimizer.step, 0
        update = inspect.unwrap(type(optimizer).step)
        self.compiled = torch.compile(lambda: update(optimizer), **kwargs)
        self.fullgraph = bool(kwargs.get("fullgraph"))
        self._wrapped_by_lr_sched = True  # the scheduler's order check: steps are real steps

    def __call__(self, closure: Any = None) -> Any:
        self.calls += 1
        if closure is not None:
            return self.eager(closure)
        if self.calls == 1:
            out = self.eager()
            self._compile_now()
            return out
        opt = self.optimizer
        for hook in opt._optimizer_step_pre_hooks.values():
            hook(opt, (opt,), {})
        out = self._update()
        opt._opt_called = True  # what the scheduler's step tracking records
        for hook in opt._optimizer_step_post_hooks.values():
            hook(opt, (opt,), {})
        return out

    def _update(self) -> Any:
        try:
            with torch.no_grad():
                return self.compiled()
        except Exception as err:
            if self.fullgraph:
                fullgraph_error(err, f"{type(self.optimizer).__name__}.step")
            raise

    def _compile_now(self) -> None:
        """Run the compiled update once on a snapshot of parameters and state, then restore
        them in place (same tensors: the compiled code's guards still hold)."""
        opt = self.optimizer
        tensors = [p for group in opt.param_groups for p in group["params"]]
        tensors += [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
        tensors += [g["lr"] for g in opt.param_groups if torch.is_tensor(g["lr"])]
        saved = [t.detach().clone() for t in tensors]
        self._update()
        with torch.no_grad():
            for tensor, value in zip(tensors, saved, strict=True):
                tensor.copy_(value)


def maybe_compile_optimizer(optimizer: torch.optim.Optimizer, cfg: CompileConfig) -> bool:
    """With compile.optimizer, make learning rates tensors (a scheduler then changes values,
    not guards: no recompilation) and compile the optimizer's update in place."""
    if cfg.disable or not cfg.optimizer:
        return False
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]))
    optimizer.step = _CompiledStep(optimizer, compile_kwargs(cfg))  # type: ignore[method-assign]
    return True


def compile_for_training(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: CompileConfig,
    *,
    device: torch.device,
    loader: Any,
    auto: dict[str, Any] | None,
) -> bool:
    """Compile model and optimizer as `cfg` says, unless compile=off or compile=auto chose
    eager; returns whether it compiled. explain and fullgraph trace one training batch."""
    if cfg.disable or (auto is not None and auto["decision"] != "compile"):
        return False
    example = None
    if cfg.explain or cfg.fullgraph:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            example = next(iter(loader))[0].to(device)  # iter() draws a seed
    apply_compile(model, compile_config=cfg, device=device, example=example)
    maybe_compile_optimizer(optimizer, cfg)
    return True
