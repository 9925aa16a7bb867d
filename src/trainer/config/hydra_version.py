"""`version_base` for Hydra's entry points (`hydra.main`, `initialize_config_dir`), as each
supported Hydra asks for it: `**VERSION_BASE`.

Hydra 1.3 wants version_base="1.3" (left out, it assumes 1.1's defaults and warns). Hydra 1.4
has only the behaviour 1.3 selects with "1.3", deprecates the argument and warns whenever it is
given (None included), so there it is left out, as Hydra's 1.3 to 1.4 upgrade guide says.
Hydra 1.5 removes it."""

from __future__ import annotations

import hydra


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a Hydra version string: "1.4.0rc3" -> (1, 4)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


VERSION_BASE: dict[str, str] = (
    {"version_base": "1.3"} if _release(hydra.__version__) < (1, 4) else {}
)
