"""How a sweep runs, typed and frozen: the `hydra.sweeper.*` keys besides the W&B configuration
(`SweepOptions`), built once from the sweeper's config, checked all at once, and handed as they
are to either backend; and what the sweep command adds for its agents (`AgentHooks`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hydra_plugins.wandb_sweeper.config import RunnerConf

if TYPE_CHECKING:
    from trainer.sweep.store.directory import SweepLayout

BACKENDS = ("local", "wandb")


def _frozen_with_fields_of(conf: type) -> Callable[[type], type]:
    """Make the decorated class a frozen dataclass with the fields of dataclass `conf`: their
    names, types and defaults, declared there once."""

    def frozen(cls: type) -> type:
        fields = dataclasses.fields(conf)
        cls.__annotations__ = {f.name: f.type for f in fields}
        for f in fields:
            setattr(
                cls, f.name, dataclasses.field(default=f.default, default_factory=f.default_factory)
            )
        return dataclass(frozen=True)(cls)

    return frozen


@_frozen_with_fields_of(RunnerConf)
class SweepOptions:
    """The keys of how a sweep runs, each as the sweeper's `RunnerConf` declares it (its type,
    default and meaning; docs/sweeps.md), read once and frozen. `agents` None: one per device
    slot, else 1; `project`/`entity` None: the logger's."""

    @classmethod
    def of(
        cls, sweeper: Mapping[str, Any], logger: Mapping[str, Any] | None = None
    ) -> SweepOptions:
        """The options among the sweeper's keys (the W&B blocks are left to the translation);
        an unset project or entity is the logger's."""
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in sweeper.items() if k in names}
        for key in ("project", "entity"):
            if given.get(key) is None and (logger or {}).get(key) is not None:
                given[key] = logger[key]
        return cls(**given)

    def problems(self) -> list[str]:
        """Problems of how the sweep is run: backend, agents, count and retries."""
        problems = []
        if self.backend not in BACKENDS:
            problems.append(
                f"hydra.sweeper.backend={self.backend!r} is not a backend; use local or wandb"
            )
        least = 0 if self.backend == "wandb" else 1
        if self.agents is not None and not _integer(self.agents, least):
            problems.append(
                f"hydra.sweeper.agents={self.agents!r} must be an integer >= {least} "
                "(0 only with backend=wandb, where it creates the sweep and starts no agent), or "
                "null: one per device slot (hydra.sweeper.devices), else 1"
            )
        if self.count is not None and not _integer(self.count, 1):
            problems.append(
                f"hydra.sweeper.count={self.count!r} must be a positive number of runs per "
                "agent, or left out (null) to run until the sweep ends"
            )
        if self.warm_start and self.backend == "wandb":
            problems.append(
                f"hydra.sweeper.warm_start={self.warm_start!r} seeds a local sweep's engine; a "
                "W&B server sweep takes earlier runs through W&B itself (wandb sweep --prior_run "
                "RUN_ID sweep.yaml): drop warm_start, or use backend=local"
            )
        if not _integer(self.max_retries, 0):
            problems.append(
                f"hydra.sweeper.max_retries={self.max_retries!r} must be an integer >= 0: the "
                "times a run lost with its agent, job or host is handed out again (0: never; "
                "it is crashed)"
            )
        return problems


def _integer(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


@dataclass(frozen=True)
class AgentHooks:
    """What the sweep command adds to how its agents start: `before_agents(layout)` runs first
    (hydra.sweeper.prewarm); `start_agents` runs them as jobs of the user's Hydra launcher
    (None: local processes)."""

    before_agents: Callable[[SweepLayout], None] | None = None
    start_agents: Callable[..., list[int]] | None = None  # agents.launched.StartAgents
