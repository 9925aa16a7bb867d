"""One error type for everything a user can fix, and the one handler every entry point uses:
`error: <one paragraph>` on stderr and the error's exit code, never a traceback."""

from __future__ import annotations

import atexit
import functools
import gc
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TrainerError(Exception):
    """A problem the user can fix; the message names the key and the fix. Exit code 2 means
    "refused before anything ran"; subclasses that fail later use 1."""

    exit_code = 2
    prefix = "error: "

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def exit_on_error(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate an entry point: a `TrainerError` becomes its message and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _skip_final_collection()
        try:
            return fn(*args, **kwargs)
        except TrainerError as err:
            print(f"{err.prefix}{err}", file=sys.stderr, flush=True)
            sys.exit(err.exit_code)

    return wrapper


def _skip_final_collection() -> None:
    """At exit, skip the interpreter's last garbage collection over torch's millions of objects
    (0.6-2 s per process here: every run, sweep trial and agent). Registered when an entry point
    starts, before any library's handler, so it runs last (atexit runs last-registered first);
    files are flushed and closed as before."""
    if gc.freeze not in _REGISTERED:
        atexit.register(gc.freeze)
        _REGISTERED.append(gc.freeze)


_REGISTERED: list[Callable[[], None]] = []
