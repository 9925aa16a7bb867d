"""`version_base` for Hydra's entry points (`hydra.main`, `initialize_config_dir`), as each
supported Hydra asks for it: `**VERSION_BASE`.

Hydra 1.3 wants version_base="1.3" (left out, it assumes 1.1's defaults and warns). Hydra 1.4
has only the behaviour 1.3 selects with "1.3", deprecates the argument and warns whenever it is
given (None included), so there it is left out, as Hydra's 1.3 to 1.4 upgrade guide says.
Hydra 1.5 removes it."""

from __future__ import annotations

from typing import Any

import hydra
from hydra._internal.hydra import Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a Hydra version string: "1.4.0rc3" -> (1, 4)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


VERSION_BASE: dict[str, str] = (
    {"version_base": "1.3"} if _release(hydra.__version__) < (1, 4) else {}
)


def _command_line_mode(overrides: list[str]) -> RunMode | None:
    """The run mode a command line's `hydra.mode=RUN|MULTIRUN` sets (the last one wins, as in
    composition), or None where it sets none or Hydra should read it (sweeps, odd values)."""
    # Only Hydra's own keys can set it: the others are left to Hydra's parse (a few ms).
    ours = [o for o in overrides if o.lstrip("+~").startswith("hydra")]
    try:
        parsed = OverridesParser.create().parse_overrides(ours)
    except HydraException:  # Hydra's own parse reports it
        return None
    mode = None
    for override in parsed:
        if override.key_or_group == "hydra":  # hydra={mode: ...}: composition decides
            return None
        if override.key_or_group != "hydra.mode" or override.package is not None:
            continue
        value = override.value()
        if override.is_sweep_override() or override.is_delete() or value not in ("RUN", "MULTIRUN"):
            return None
        mode = RunMode[value]
    return mode


def mode_without_composing() -> None:
    """Hydra 1.3 composes the whole config once just to read `hydra.mode`, and then again to
    run (about 0.1 s of each sweep trial, whose command line says hydra.mode=RUN). Where the
    command line sets it, this reads it from there, as Hydra 1.4 does: the command line's value
    is what that composition returns (its overrides are applied last), and a composition that
    fails fails the same way in the run's. Hydra 1.4 and later: nothing to do."""
    if _release(hydra.__version__) >= (1, 4):
        return
    composing = Hydra.get_mode
    if getattr(composing, "reads_command_line", False):  # done already (tests call cli twice)
        return

    def get_mode(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        mode = _command_line_mode(overrides)
        return mode if mode is not None else composing(self, config_name, overrides)

    get_mode.reads_command_line = True  # type: ignore[attr-defined]
    Hydra.get_mode = get_mode  # type: ignore[method-assign]
