"""What a sweep's `scheduler:` block (W&B's pluggable scheduler) says: its engine, whether a
W&B optimizer object drives the runs (optuna, ax), and whether that engine is installed."""

from __future__ import annotations

import importlib.util
from typing import Any

# Engines whose optimizer object W&B's scheduler drives; `wandb` is the classic engine (engine.py).
OPTIMIZER_ENGINES = ("optuna", "ax")
LIBRARY = {"optuna": "optuna", "ax": "ax"}  # the module each engine imports


def engine_of(config: dict[str, Any]) -> str | None:
    """`scheduler.engine` of a sweep configuration, or None without a scheduler block."""
    scheduler = config.get("scheduler")
    return scheduler.get("engine") if isinstance(scheduler, dict) else None


def drives_optimizer(config: dict[str, Any]) -> bool:
    """Whether the sweep's runs come from a W&B scheduler optimizer (optuna, ax)."""
    return engine_of(config) in OPTIMIZER_ENGINES


def missing_engine(engine: str | None) -> str | None:
    """Why `engine` cannot run here (its library is not installed) and how to install it."""
    module = LIBRARY.get(engine or "")
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    if engine == "ax":
        return (
            "scheduler.engine: ax needs Ax, an optional extra of this project: "
            'pip install -e ".[ax]" (or pip install "compiled-trainer[ax]"); or use engine: optuna'
        )
    return f"scheduler.engine: {engine} needs {module}: reinstall the project (pip install -e .)"
