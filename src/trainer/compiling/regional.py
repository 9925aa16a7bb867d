"""Regional compile (compile.target=blocks), as torchtitan does it: each block is compiled on
its own, in place. Dynamo keys its cache on a code object and every nn.Module call runs the
same one, so blocks that differ (ResNet's BasicBlocks of different widths or strides, a
first encoder layer fed a differently strided input) would recompile each other until the
recompile limit. Each distinct block (its structure, parameter shapes, input layout and mode)
therefore gets a code object of its own: compiled once, never recompiled."""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainer.compiling.stats import fullgraph_error


def _call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return module._call_impl(*args, **kwargs)


def _fresh_entry(index: int) -> Callable[..., Any]:
    """A copy of `_call` with its own code object (a cache of Dynamo's own)."""
    code = _call.__code__.replace(co_name=f"compiled_block_{index}")
    return types.FunctionType(code, _call.__globals__, code.co_name)


def _layout(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad)
    if isinstance(value, list | tuple):
        return tuple(_layout(v) for v in value)
    return type(value)


class _BlockCall:
    """A block's `_compiled_call_impl`: its compiled entry for this call's inputs. A deep copy
    of the block calls the copy (entries are shared: a copy has the same kind)."""

    def __init__(self, compiler: RegionalCompiler, block: nn.Module) -> None:
        self.compiler, self.block, self.kind = compiler, block, compiler.kind(block)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        layout = (_layout(args), tuple((k, _layout(v)) for k, v in kwargs.items()))
        entry = self.compiler.entry((self.kind, self.block.training, layout))
        try:
            return entry(self.block, *args, **kwargs)
        except Exception as err:
            if self.compiler.kwargs.get("fullgraph"):
                fullgraph_error(err, f"block {type(self.block).__name__}")
            raise

    def __deepcopy__(self, memo: dict[int, Any]) -> _BlockCall:
        copied = _BlockCall.__new__(_BlockCall)
        copied.compiler, copied.kind = self.compiler, self.kind
        copied.block = copy.deepcopy(self.block, memo)
        return copied


class RegionalCompiler:
    """One compiled entry per distinct (block kind, train/eval mode, input layout)."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.entries: dict[Any, Callable[..., Any]] = {}

    @staticmethod
    def kind(block: nn.Module) -> str:
        tensors = (*block.named_parameters(), *block.named_buffers())
        return f"{block!r}{[(name, tuple(t.shape)) for name, t in tensors]}"

    def entry(self, key: Any) -> Callable[..., Any]:
        if key not in self.entries:
            self.entries[key] = torch.compile(_fresh_entry(len(self.entries)), **self.kwargs)
        return self.entries[key]

    def attach(self, block: nn.Module) -> None:
        """Compile `block` in place: nn.Module.__call__ runs `_compiled_call_impl` when set
        (what block.compile() sets), so state_dict keys and hooks stay the block's own."""
        block._compiled_call_impl = _BlockCall(self, block)

    @property
    def distinct(self) -> int:
        return len(self.entries)
