"""The Sweeper Hydra discovers; the work (and its heavy imports) lives in `_impl`."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.wandb_sweeper.config import WandbSweeperConf


class WandbSweeper(Sweeper):
    """Translates the multirun into a W&B sweep configuration, validates it, and runs it."""

    def __init__(self, **keys: Any) -> None:
        """Hydra calls the sweeper with the keys of `hydra.sweeper` (composed against
        WandbSweeperConf, which declares each key's type and default); they are that conf."""
        self.conf = WandbSweeperConf(**keys)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def sweep(self, arguments: list[str]) -> Any:
        # lazy: Hydra imports this module at every start-up; _impl costs 1.7 s (the sweep's modules, torch)
        from hydra_plugins.wandb_sweeper._impl import sweep

        return sweep(self.conf, self.config, self.hydra_context, list(arguments))
