"""The project's conf/ folder, and `~` and `$VAR` in path keys: expanded where a path is read
(`expand_path`) and, on the command line, rewritten before Hydra parses argv (its lexer rejects
a bare `~`). Light imports only."""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainer.trial.trial_argv import hydra_value

# Keys whose values are paths, as written on the command line (evaluate's `checkpoint` too).
PATH_KEYS = re.compile(
    r"^(\+{0,2})(data\.root|paths\.\w+|compile\.cache_dir|trainer\.resume|checkpoint)=(.*)$",
    re.DOTALL,
)


def conf_dir() -> str:
    """conf/ at the repository root (editable install), or packaged inside the trainer package."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "conf", package.parents[1] / "conf"):
        if (candidate / "train.yaml").is_file():
            return str(candidate)
    raise SystemExit(
        "compiled-trainer: cannot find its conf/ folder; reinstall with pip install -e ."
    )


def expand_path(path: str | None) -> str | None:
    """`path` with `~`, `~user`, `$VAR` and `${VAR}` expanded (None and '' stay as they are)."""
    if not path:
        return path
    return os.path.expanduser(os.path.expandvars(path))


def expand_path_argv(argv: list[str]) -> list[str]:
    """argv with each path override holding `~` or `$VAR` expanded and written so Hydra reads
    it back as exactly that string; Hydra's own `${...}` interpolations are left to Hydra."""
    out = list(argv[:1])
    for arg in argv[1:]:
        match = PATH_KEYS.match(arg)
        value = match.group(3) if match else ""
        if match and re.search(r"~|\$(?!\{)", value):
            quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            items = [value] if quoted else value.split(",")  # a,b: a multirun sweep
            text = ",".join(hydra_value(_expand_unquoted(item)) for item in items)
            arg = f"{match.group(1)}{match.group(2)}={text}"
        out.append(arg)
    return out


def _expand_unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]  # a quoted value: its text, expanded
    return expand_path(value) or value
