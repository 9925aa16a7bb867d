"""Exact sweep values on a trial's command line.

W&B's agent writes each parameter as `f"{key}={value}"` (`${args_no_hyphens}`): Python's str(),
which Hydra reads back wrongly for None ("None" is a string), strings with commas (a sweep),
quotes, `=` or brackets. The agent also writes the exact values to WANDB_SWEEP_PARAM_PATH (a
`{key: {value: v}}` YAML), so a trial rewrites those arguments in Hydra's syntax before Hydra
parses argv. Light imports only: this runs before Hydra starts."""

from __future__ import annotations

import math
import re
from typing import Any

from trainer.trial.trial_params import param_path, sweep_param_values


def hydra_value(value: Any) -> str:
    """A Python value in Hydra override syntax, read back by Hydra as exactly that value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if _reads_back(str(value)):
        return str(value)  # a plain word (e.g. a config-group option) needs no quotes
    # Hydra keeps backslashes as they are, except a run of them before a quote (or the end).
    text = re.sub(
        r"(\\*)('|$)",
        lambda m: m.group(1) * 2 + ("\\" if m.group(2) else "") + m.group(2),
        str(value),
    )
    return f"'{text}'"


def _reads_back(text: str) -> bool:
    """Whether Hydra reads `key=<text>` back as exactly the string `text`."""
    # lazy: Hydra costs 0.12 s at start-up; of the values a trial repairs, only strings ask it
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(f"key={text}").value()
    except HydraException:
        return False
    return isinstance(parsed, str) and parsed == text


def repair_argv(argv: list[str], params: dict[str, Any]) -> list[str]:
    """Replace each `key=<str(value)>` the agent wrote with `key=<value in Hydra syntax>`."""
    expected = {f"{key}={value}": key for key, value in params.items()}
    repaired = []
    for arg in argv:
        key = expected.get(arg)
        repaired.append(arg if key is None else f"{key}={hydra_value(params[key])}")
    return repaired


def repair_sys_argv(argv: list[str]) -> list[str]:
    """argv with sweep values repaired when this process is a sweep trial, else unchanged."""
    path = param_path()
    if path is None:
        return argv
    return argv[:1] + repair_argv(argv[1:], sweep_param_values(path))
