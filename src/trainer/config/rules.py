"""The rules every config schema shares: the error type, one-of / positive checks with messages
that name the override fixing them, and flattening a nested config to dotted keys; no torch."""

from __future__ import annotations

import difflib
from typing import Any

from trainer.errors import TrainerError


class ConfigError(TrainerError, ValueError):
    """A configuration problem; the message says which override fixes it (exit code 2)."""


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def one_of(key: str, value: Any, allowed: tuple[str, ...], *, where: str = "") -> None:
    """`value` is one of `allowed`; `where` says where the choices come from, if anywhere."""
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" Did you mean {key}={close[0]}?" if close else ""
        raise ConfigError(
            f"{key}={value!r} is not supported; choose one of {', '.join(allowed)}{where}.{hint}"
        )


def unknown_key_message(key: str, fields: list[str]) -> str:
    """`key` is no setting: the closest of `fields` (the keys beside it) and all of them."""
    group, _, leaf = key.rpartition(".")
    close = difflib.get_close_matches(leaf, fields, n=1)
    hint = f" Did you mean {group + '.' if group else ''}{close[0]}?" if close else ""
    return (
        f"{key} is not a known setting.{hint} Known keys under {group or 'the root'}: "
        f"{', '.join(fields)}"
    )


def positive(key: str, value: float | int | None) -> None:
    check(value is None or value > 0, f"{key} must be positive, got {value}; set {key}=<n > 0>.")


def auto_or_count(key: str, value: Any, *, minimum: int, example: str) -> None:
    """`value` is `auto` or an int (not a bool) of at least `minimum`."""
    ok = value == "auto" or (type(value) is int and value >= minimum)
    check(ok, f"{key}={value!r} must be auto or a whole number >= {minimum}; {example}.")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
