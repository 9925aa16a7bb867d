"""The local backend's entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_sweep_yaml(config: dict[str, Any], path: Path) -> None:
    """Write the W&B sweep configuration as YAML (`wandb sweep sweep.yaml` accepts it as is)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(config, sort_keys=False))
