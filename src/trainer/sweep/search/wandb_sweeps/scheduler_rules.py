"""What W&B's sweep configuration check rejects in a config that names a custom scheduler.

Ported from wandb/sweeps 0.3.0 (sweeps/config/cfg.py), MIT License, Copyright (c) 2021 Weights
and Biases; see LICENSE-third-party.md. Changes: moved out of
schema_violations_from_proposed_config into its own function.
"""

from __future__ import annotations

from typing import Any

_SUPPORTED_METHODS_BY_ENGINE = {
    "wandb": ["grid", "bayes", "random"],
    "optuna": ["custom"],
    "ax": ["custom"],
}


def scheduler_violations(config: dict, method: Any, scheduler: Any) -> list[str]:
    """What W&B rejects in a config that names a custom scheduler."""
    messages: list[str] = []
    if "controller" in config and config["controller"]["type"] == "local":
        messages.append(
            "`controller: type:local` cannot be used together with `scheduler`: "
            "use `scheduler` instead of `controller`."
        )
    if "early_terminate" in config:
        messages.append(
            "`early_terminate` cannot be used together with `scheduler`: "
            "early termination must be implemented by the custom scheduler "
            "itself."
        )
    if isinstance(scheduler, dict):
        engine = scheduler.get("engine")
        if engine not in _SUPPORTED_METHODS_BY_ENGINE:
            messages.append(
                f"scheduler.engine '{engine}' is not supported. "
                f"supported engines are: {', '.join(_SUPPORTED_METHODS_BY_ENGINE)}"
            )
        elif method not in _SUPPORTED_METHODS_BY_ENGINE[engine]:
            messages.append(
                f"`scheduler.engine: {engine}` does not support `method: {method}`. "
                "supported methods are: "
                + ", ".join(f"`method: {m}`" for m in _SUPPORTED_METHODS_BY_ENGINE[engine])
            )
    return messages
