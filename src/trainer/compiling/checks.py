"""Checks of the `compile` group that need no data: mode, backend, backend module, Inductor
options and what the hardware can compile for; each failure names the key and the fix."""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import shutil

import torch

from trainer.compiling import torch_private
from trainer.config.schema import CompileConfig, ConfigError

log = logging.getLogger(__name__)

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes that turn on CUDA graphs


def valid_modes() -> list[str]:
    return list(torch_private.mode_options())


def valid_backends() -> list[str]:
    return sorted(torch.compiler.list_backends(exclude_tags=()))


def check_options(options: dict | None) -> None:
    """Every key of compile.options must be an Inductor option."""
    known = set(torch_private.inductor_options())
    unknown = [str(key) for key in options or {} if str(key) not in known]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(known), n=3)
        hints.append(f"{key} (did you mean {' or '.join(close)}?)" if close else key)
    examples = ", ".join(
        k
        for k in (
            "epilogue_fusion",
            "max_autotune",
            "shape_padding",
            "coordinate_descent_tuning",
            "triton.cudagraphs",
        )
        if k in known
    )
    raise ConfigError(
        f"compile.options has unknown Inductor option(s): {'; '.join(hints)}. Valid options "
        f'include {examples} ({len(known)} in all: python -c "import torch._inductor; '
        'print(torch._inductor.list_options())"); fix or remove the key, e.g. '
        "compile.options={epilogue_fusion: true}."
    )


def check_config(cfg: CompileConfig) -> None:
    """Reject an unknown mode, backend, backend module or Inductor option in our own words."""
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
    if cfg.backend == "inductor":
        check_options(cfg.options)
    elif cfg.options:
        raise ConfigError(
            f"compile.options are Inductor options, but compile.backend={cfg.backend} ignores "
            f"them (given: {', '.join(map(str, cfg.options))}); drop compile.options, or use "
            "compile.backend=inductor for them to take effect."
        )


def has_cxx_compiler() -> bool:
    names = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    return any(name and shutil.which(name) for name in names)


def check_hardware(cfg: CompileConfig, device: torch.device, *, warn: bool = True) -> list[str]:
    """Errors for setups Inductor cannot compile for; returns (and with `warn` logs) notes
    about what will happen."""
    notes: list[str] = []
    if cfg.backend == "inductor" and device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major < 7:
            raise ConfigError(
                f"compile.backend=inductor generates Triton kernels, which need a GPU of compute "
                f"capability 7.0 or newer; {torch.cuda.get_device_name(device)} has {major}.{minor}. "
                "Use compile.backend=aot_eager (or cudagraphs), or compile=off."
            )
    if cfg.backend == "inductor" and device.type == "cpu" and not has_cxx_compiler():
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
    for note in notes if warn else ():
        log.warning(note)
    return notes
