"""Where a run's compile-cache bundle is: `TRAINER_CACHE_BUNDLE` (a folder; `wandb` for the W&B
artifacts of the run's project; `off`), which a local sweep agent sets to its sweep's folder,
else W&B artifacts for a W&B-server sweep trial (online). Light imports: agents read it."""

from __future__ import annotations

import os
from pathlib import Path

BUNDLE_ENV = "TRAINER_CACHE_BUNDLE"
WANDB = "wandb"


def sweep_bundle_env(bundle: Path) -> dict[str, str]:
    """What a local agent adds to a trial's environment: its sweep's bundle folder, unless the
    user named one (or `off`) already."""
    if os.environ.get(BUNDLE_ENV):
        return {}
    return {BUNDLE_ENV: str(bundle)}


def bundle_setting(logger_mode: str, logger_enabled: bool) -> str | Path | None:
    """The bundle of this process: a folder, WANDB, or None (the local cache alone)."""
    value = os.environ.get(BUNDLE_ENV, "").strip()
    if value == "off":
        return None
    if value == WANDB:
        return WANDB
    if value:
        return Path(os.path.expanduser(os.path.expandvars(value)))
    mode = os.environ.get("WANDB_MODE") or logger_mode
    if os.environ.get("WANDB_SWEEP_ID") and logger_enabled and mode == "online":
        return WANDB
    return None
