"""torch.compile for the trainer: `checks` (every check that needs no data), `apply`
(`apply_compile`, in place), `stats` (telemetry from Dynamo's counters), `auto` (compile=auto);
every private torch API lives in `torch_private`."""

from trainer.compiling.apply import (
    apply_compile,
    compile_for_training,
    compile_kwargs,
    configure_cache,
    describe,
    explain,
    maybe_compile_optimizer,
    quiet_cuda_home_probe,
    repeated_blocks,
)
from trainer.compiling.checks import (
    CUDA_GRAPH_MODES,
    check_config,
    check_hardware,
    check_options,
    valid_backends,
    valid_modes,
)
from trainer.compiling.stats import (
    CompileError,
    compile_stats,
    is_compiled,
    raise_if_limit_error,
    reset,
    summary_for_tracker,
    watch_recompile_limit,
)

__all__ = [
    "CUDA_GRAPH_MODES",
    "CompileError",
    "apply_compile",
    "check_config",
    "check_hardware",
    "check_options",
    "compile_for_training",
    "compile_kwargs",
    "compile_stats",
    "configure_cache",
    "describe",
    "explain",
    "is_compiled",
    "maybe_compile_optimizer",
    "quiet_cuda_home_probe",
    "raise_if_limit_error",
    "repeated_blocks",
    "reset",
    "summary_for_tracker",
    "valid_backends",
    "valid_modes",
    "watch_recompile_limit",
]
