"""Every private torch API the project uses, in this one module: torch has no public
equivalent for Dynamo's counters, compilation metrics, `explain`, the recompile-limit switch
and logger, Inductor's option lists or its cache controls (benchmarks). tests/compiling/test_compile.py
checks each still exists, so a torch release that moves one fails loudly there."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

from torch import nn
from torch._logging import _internal

log = logging.getLogger(__name__)

# Dynamo and Inductor are imported inside the functions that use them: each costs 1.0 s at
# start-up after torch, and preflight's checks of a compile=off config never load them.

# The logger Dynamo warns on when a frame hits config.recompile_limit (no public hook).
RECOMPILE_LIMIT_LOGGER = "torch._dynamo.convert_frame"

# (module, attribute) of every private name used below; the test imports each.
PRIVATE_NAMES = (
    ("torch._inductor", "list_mode_options"),
    ("torch._inductor", "list_options"),
    ("torch._dynamo", "explain"),
    ("torch._dynamo.config", "fail_on_recompile_limit_hit"),
    ("torch._dynamo.utils", "counters"),
    ("torch._dynamo.utils", "get_compilation_metrics"),
    ("torch._dynamo.utils", "clear_compilation_metrics"),
    ("torch._dynamo.exc", "FailOnRecompileLimitHit"),
    ("torch._dynamo.exc", "Unsupported"),
    ("torch._dynamo.eval_frame", "OptimizedModule"),
    ("torch._inductor.utils", "fresh_cache"),
    ("torch._inductor.utils", "clear_caches"),
    ("torch._logging._internal", "LOG_TRACE_HANDLER"),
    ("torch._logging._internal", "trace_log"),
)


def mode_options() -> dict[str, dict[str, Any]]:
    """torch.compile's modes and the Inductor options each sets."""
    import torch._inductor  # lazy: Inductor (the note at the top)

    return dict(torch._inductor.list_mode_options())


def inductor_options() -> list[str]:
    """Every option name `torch.compile(options=...)` accepts for Inductor."""
    import torch._inductor  # lazy: Inductor (the note at the top)

    return list(torch._inductor.list_options())


def explain(model: nn.Module) -> Any:
    """Dynamo's explain wrapper of `model` (call it with the inputs); it traces like a
    compile, so the 3.13.0 guard warning is silenced first."""
    import torch._dynamo  # lazy: Dynamo (the note at the top)

    note_python_3130_guards()
    return torch._dynamo.explain(model)


def set_fail_on_recompile_limit(flag: bool) -> None:
    import torch._dynamo.config  # lazy: Dynamo (the note at the top)

    torch._dynamo.config.fail_on_recompile_limit_hit = flag


def counters() -> Any:
    """Dynamo's and Inductor's event counters ({"stats": {...}, "graph_break": {...}, ...})."""
    # lazy: Dynamo (the note at the top)
    from torch._dynamo.utils import counters as dynamo_counters

    return dynamo_counters


def compilation_metrics() -> list[Any]:
    """One record per compiled frame: compile time, recompile and CUDA-graph skip reasons."""
    from torch._dynamo.utils import get_compilation_metrics  # lazy: Dynamo (the note at the top)

    return list(get_compilation_metrics())


def clear_statistics() -> None:
    from torch._dynamo.utils import clear_compilation_metrics  # lazy: Dynamo (the note at the top)

    counters().clear()
    clear_compilation_metrics()


def is_recompile_limit_error(err: BaseException) -> bool:
    from torch._dynamo.exc import FailOnRecompileLimitHit  # lazy: Dynamo (the note at the top)

    return isinstance(err, FailOnRecompileLimitHit) or isinstance(
        err.__cause__, FailOnRecompileLimitHit
    )


def is_optimized_module(model: nn.Module) -> bool:
    from torch._dynamo.eval_frame import OptimizedModule  # lazy: Dynamo (the note at the top)

    return isinstance(model, OptimizedModule)


def fresh_inductor_cache() -> Any:
    """A context with an empty Inductor/AOTAutograd cache directory, removed afterwards."""
    from torch._inductor.utils import fresh_cache  # lazy: Inductor (the note at the top)

    return fresh_cache()


def clear_inductor_memory_caches() -> None:
    """Drop Inductor's in-memory caches; the on-disk cache stays."""
    from torch._inductor.utils import clear_caches  # lazy: Inductor (the note at the top)

    clear_caches()


def set_trace_dir(directory: str | None) -> None:
    """Send torch's structured compile trace (what TORCH_TRACE names) to `directory`, or stop
    it (None), in a process that imported torch already: TORCH_TRACE is read only at import."""
    handler, trace_log = _internal.LOG_TRACE_HANDLER, _internal.trace_log
    if handler is None:
        raise RuntimeError("torch's trace handler is not set up; compile.trace cannot work")
    handler.close()  # ends the previous trace file; the next event opens one in root_dir
    handler.root_dir = directory
    if directory is None:
        trace_log.removeHandler(handler)
    elif handler not in trace_log.handlers:  # it removes itself when it has no folder
        trace_log.addHandler(handler)


def is_graph_break_error(err: BaseException) -> bool:
    """Whether `err` is Dynamo refusing a graph break (fullgraph=True)."""
    from torch._dynamo.exc import Unsupported  # lazy: Dynamo (the note at the top)

    return isinstance(err, Unsupported) or isinstance(err.__cause__, Unsupported)


def note_python_3130_guards() -> None:
    """On Python 3.13.0 Dynamo warns "Guards may run slower" (a CPython bug, fixed in 3.13.1,
    makes it skip a guard fast path) with a RuntimeWarning on every compiled frame. Keep torch's
    safe path, silence its warning (again before each compile: a caller may have reset the
    filters) and say it once, in the project's words."""
    if sys.version_info[:3] != (3, 13, 0):
        return
    warnings.filterwarnings(
        "ignore", message="Guards may run slower on Python 3.13.0", category=RuntimeWarning
    )
    if not _NOTED:
        _NOTED.append(True)
        log.warning(
            "Python 3.13.0: TorchDynamo's guards run slower on this release (fixed in 3.13.1); "
            "upgrade Python for faster compiled steps."
        )


_NOTED: list[bool] = []  # the 3.13.0 notice was given in this process
