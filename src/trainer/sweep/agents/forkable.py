"""Which trials a trial template may start: a sweep command that runs `python -m trainer` on
the agent's interpreter, with an environment that differs from the template's only per trial."""

from __future__ import annotations

import os
import sys

from trainer.cache.env import BUNDLE_ENV
from trainer.trial.pbt_files import ENV as PBT_ENV

# A trial's environment may differ from its template's only in these (read after the fork).
PER_TRIAL_PREFIXES = ("WANDB_",)
PER_TRIAL_KEYS = ("CUDA_VISIBLE_DEVICES", BUNDLE_ENV, PBT_ENV)
MODULES = ("trainer",)  # what a template forks into: the sweep's entry point


def without_env(argv: list[str]) -> list[str]:
    """The command after W&B's `${env}` (/usr/bin/env) prefix."""
    return argv[1:] if argv and os.path.basename(argv[0]) == "env" else argv


def forkable(command: list[str], modules: tuple[str, ...] = MODULES) -> bool:
    """Whether a sweep's `command` (macros unexpanded) runs `python -m trainer` on the agent's
    interpreter, so a template can start its trials."""
    body = [str(c) for c in command]
    body = body[1:] if body[:1] == ["${env}"] else body
    return (
        len(body) >= 3
        and body[0] in ("${interpreter}", sys.executable)
        and body[1] == "-m"
        and body[2] in modules
    )


def template_flags(command: list[str] | None) -> list[str]:
    """What the template need not import for a sweep's trials: Inductor's compiler when its
    fixed overrides say `compile=off`, W&B when they say `logger=none` (a trial that needs one
    anyway, through a swept key, imports it itself)."""
    fixed = [str(c) for c in command or ()]
    return [
        *(["--no-compiler"] if "compile=off" in fixed else []),
        *(["--no-wandb"] if "logger=none" in fixed else []),
    ]


def env_difference(
    template_env: dict[str, str], env: dict[str, str], set_by_imports: dict[str, str]
) -> list[str]:
    """Variables that differ between the template and a trial beyond the per-trial ones, and
    beyond the defaults the template's imports set (which the agent's own imports may have
    set too, and which a forked trial gets, as a new process would)."""
    keys = set(template_env) | set(env)
    return sorted(
        k
        for k in keys
        if template_env.get(k) != env.get(k)
        and not k.startswith(PER_TRIAL_PREFIXES)
        and k not in PER_TRIAL_KEYS
        and env.get(k, set_by_imports.get(k)) != set_by_imports.get(k, object())
    )
