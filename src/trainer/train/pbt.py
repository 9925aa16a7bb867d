"""A population-based-training member inside its trial: at each interval it reports its score
and takes its agent's answer (trainer.trial.pbt_files); told to copy a leader, it loads a leader's checkpoint into its own model, optimizer, EMA, schedule and
scaler, in place, then takes the explored hyperparameters as new values of the same tensors and
fields, so the compiled model and the compiled optimizer keep their graphs (no recompile)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainer.config.schema import ConfigError, TrainerConfig
from trainer.outputs.layout import RunLayout
from trainer.train.checkpoint import TrainState, load, load_model_state
from trainer.train.optim import KERNEL_FLAGS
from trainer.trial import pbt_files

log = logging.getLogger(__name__)
KEY = "hydra.sweeper.pbt"  # what a bad checkpoint of a leader is reported under


def _dotted(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


def _set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value


def _assign(group: dict[str, Any], name: str, value: float) -> None:
    """A param-group value: a tensor (the compiled optimizer reads it) takes it in place."""
    if torch.is_tensor(group[name]):
        group[name].fill_(float(value))
    else:
        group[name] = value


def set_lr(state: TrainState, lr: float) -> None:
    """A new base learning rate: the schedule's position is kept (its factor applies to it)."""
    groups = state.optimizer.param_groups
    scheduler = state.scheduler
    base = float(scheduler.base_lrs[0]) if scheduler is not None else float(groups[0]["lr"])
    ratio = lr / base if base else 0.0
    for group in groups:
        _assign(group, "lr", float(group["lr"]) * ratio if base else lr)
        if "initial_lr" in group:
            group["initial_lr"] = lr
    if scheduler is not None:
        scheduler.base_lrs = [lr] * len(groups)


def apply(state: TrainState, trainer: TrainerConfig, params: dict[str, Any]) -> None:
    """Train with `params` from now on (only keys that change no shape and no graph)."""
    for key, value in params.items():
        section, name = key.split(".", 1)
        if key == "optimizer.lr":
            set_lr(state, float(value))
        elif section == "optimizer":
            for group in state.optimizer.param_groups:
                _assign(group, name, value)
        else:
            setattr(trainer, name, value)
        _set_dotted(state.config, key, value)


def load_optimizer_in_place(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Another run's optimizer state copied into this optimizer's own tensors (their identity is
    what the compiled update was traced with); its kernel choice is kept."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, param in enumerate(params):
        theirs = saved["state"].get(index, {})
        mine = optimizer.state[param]
        for name, value in theirs.items():
            have = mine.get(name)
            if torch.is_tensor(value) and torch.is_tensor(have) and have.shape == value.shape:
                have.copy_(value)
            elif torch.is_tensor(value):
                mine[name] = value.to(param.device if value.dim() else value.device)
            else:
                mine[name] = value
    for group, theirs in zip(optimizer.param_groups, saved["param_groups"], strict=True):
        for name, value in theirs.items():
            if name == "params" or name in KERNEL_FLAGS or name not in group:
                continue
            if torch.is_tensor(group[name]):
                group[name].fill_(float(value))
            else:
                group[name] = float(value) if torch.is_tensor(value) else value


class Member:
    """This trial as a member of a PBT population; `ask` gets the answer to a published report
    (by default its agent's, through the PBT folder)."""

    def __init__(
        self,
        settings: pbt_files.Settings,
        layout: RunLayout,
        ask: Callable[
            [pbt_files.Settings, pbt_files.Report], pbt_files.Step
        ] = pbt_files.await_decision,
    ) -> None:
        self.settings, self.layout, self.ask = settings, layout, ask
        self.lineage = pbt_files.Lineage.read(settings.folder, settings.member)

    def params(self, state: TrainState) -> dict[str, Any]:
        return {key: _dotted(state.config, key) for key in sorted(self.settings.parameters)}

    def check(self, state: TrainState) -> None:
        """Every PBT key applies to this run's optimizer (momentum: SGD's), before training."""
        group = state.optimizer.param_groups[0]
        for key in self.settings.parameters:
            section, name = key.split(".", 1)
            if section == "optimizer" and name not in group:
                raise ConfigError(
                    f"hydra.sweeper.parameters.{key}: optimizer "
                    f"{type(state.optimizer).__name__} has no {name}; drop it from the PBT "
                    "search space or choose an optimizer that has it (optimizer=sgd)"
                )

    def join(self, state: TrainState, trainer: TrainerConfig) -> None:
        """At the start of the trial (fresh or resumed): the lineage's first step, or the step
        in force where the checkpoint left off (a copy redone when it stopped in between)."""
        self.check(state)
        epoch = state.progress.epoch
        if not self.lineage.steps:
            self.lineage.add(pbt_files.Step(0, self.params(state)))
            self.lineage.write(self.settings.folder, self.settings.member)
        boundary = state.progress.batches_done == 0 and self.settings.is_boundary(
            epoch, trainer.max_epochs
        )
        step = self.lineage.at(epoch)
        if boundary and (step is None or step.epoch != epoch):  # stopped before deciding
            self.decide(state, trainer, state.progress.history[-1])
            return
        if boundary and step is not None and step.copied_from:  # a copy to make (again)
            self.copy(state, step)
        if step is not None:
            apply(state, trainer, step.params)

    def after_epoch(self, state: TrainState, trainer: TrainerConfig, row: dict[str, float]) -> bool:
        """At an interval's end: report, decide, copy and explore; whether it changed anything
        (then the caller saves last.pt again)."""
        if not self.settings.is_boundary(state.progress.epoch, trainer.max_epochs):
            return False
        return self.decide(state, trainer, row)

    def decide(self, state: TrainState, trainer: TrainerConfig, row: dict[str, float]) -> bool:
        epoch = state.progress.epoch
        snapshot = pbt_files.checkpoint_path(self.settings, epoch)
        _keep(self.layout.last, snapshot)
        own = pbt_files.Report(
            self.settings.member, epoch, float(row[self.settings.metric]), self.params(state),
            str(snapshot),
        )  # fmt: skip
        pbt_files.publish(self.settings, own)
        step = self.ask(self.settings, own)
        self.lineage.add(step)
        self.lineage.write(self.settings.folder, self.settings.member)
        if step.copied_from is None:
            log.info("pbt: epoch %d, %s %.4g: kept", epoch, self.settings.metric, own.score)
            return False
        self.copy(state, step)
        apply(state, trainer, step.params)
        log.info(
            "pbt: epoch %d, %s %.4g: copied %s (%.4g), now %s", epoch, self.settings.metric,
            own.score, step.copied_from, step.leader_score, step.params,
        )  # fmt: skip
        return True

    def copy(self, state: TrainState, step: pbt_files.Step) -> None:
        """The leader's checkpoint of this epoch into this run's objects, in place; this run's
        progress, history and random streams stay its own."""
        source = Path(self.settings.folder) / str(step.copied_from) / f"epoch-{step.epoch:04d}.pt"
        ckpt = load(source, key=KEY)
        load_model_state(state.model, ckpt["model"], source=str(source), key=KEY)
        load_optimizer_in_place(state.optimizer, ckpt["optimizer"])
        for name in ("scheduler", "scaler"):
            target = getattr(state, name)
            if target is not None and ckpt.get(name) is not None:
                target.load_state_dict(ckpt[name])
        if state.ema is not None and ckpt.get("ema") is not None:
            state.ema.load_state_dict(ckpt["ema"], source=str(source))


def _keep(last: Path, snapshot: Path) -> None:
    """`last` (this epoch's checkpoint) as `snapshot`, for other members to copy: a hard link
    where the file system allows one (last.pt is replaced, never rewritten), else a copy."""
    if snapshot.is_file():
        return
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    tmp = snapshot.with_name(f".{snapshot.name}.{os.getpid()}.tmp")
    try:
        os.link(last, tmp)
    except OSError:
        shutil.copyfile(last, tmp)
    os.replace(tmp, snapshot)


def member_of(layout: RunLayout, world_size: int) -> Member | None:
    """This trial's PBT membership (from the agent's environment), None outside a PBT sweep."""
    settings = pbt_files.Settings.from_env()
    if settings is None:
        return None
    if not settings.member:
        raise ConfigError(
            f"{pbt_files.ENV} is set but {pbt_files.RUN_ID_ENV} is not: a PBT member is a run "
            "its sweep agent starts (python -m trainer.agent), not a run of its own"
        )
    if world_size > 1:
        raise ConfigError(
            "a PBT member trains in one process: use hydra.sweeper.gpus_per_trial=1 with "
            "hydra.sweeper.method=pbt"
        )
    return Member(settings, layout)


def joined(
    layout: RunLayout, world_size: int, state: TrainState, trainer: TrainerConfig
) -> Member | None:
    """This trial's PBT membership, joined (the values its lineage gives from here on), or
    None outside a PBT sweep."""
    member = member_of(layout, world_size)
    if member is not None:
        member.join(state, trainer)
    return member
