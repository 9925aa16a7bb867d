"""`run(cfg)`: the one orchestration function. Validate, set up, build, restore, compile, fit,
finish; each step lives in the module that owns its data."""

from __future__ import annotations

import functools
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from trainer import compiling, devices, distributed, threads
from trainer.checkpoint import TrainState
from trainer.compiling.auto import StepRecipe, maybe_decide, planned_steps
from trainer.config import ConfigError, TrainConfig, flatten, validate
from trainer.console import print_summary
from trainer.data import DataBundle, build_data
from trainer.fit import Interrupted, Job, fit, summarise
from trainer.layout import RunLayout
from trainer.loop import Progress
from trainer.models import build_model, input_spec
from trainer.optim import build_optimizer, build_scheduler
from trainer.tracking import Tracker, start_tracker

__all__ = ["Interrupted", "resolve_run_dir", "run"]

log = logging.getLogger(__name__)


def run(cfg: DictConfig, *, run_dir: str | Path | None = None) -> dict[str, float]:
    """Train and evaluate as `cfg` says; return the last epoch's metrics plus `best`."""
    conf = validate(cfg)  # every check that needs no data, before anything is built
    t = conf.trainer
    cpu = threads.apply(t.num_threads, conf.data.num_workers)  # before any parallel work
    ctx = distributed.setup(t)  # trainer.strategy=ddp: this rank of torchrun's process group
    layout = RunLayout(distributed.agree_run_dir(ctx, resolve_run_dir(run_dir)))
    layout.root.mkdir(parents=True, exist_ok=True)
    device = ctx.device or devices.resolve_device(t.device)
    dtype = devices.resolve_precision(t.precision, device)
    compiling.configure_cache(conf.compile)  # before anything compiles
    compiling.reset()
    seed_everything(t.seed)

    data = build_run_data(conf, device, ctx)
    state = build_state(conf, data, device)
    resume_from = resume_path(t.resume, layout)
    if resume_from is not None:
        state.restore(resume_from, is_main=ctx.is_main)

    recipe = StepRecipe(device, precision=t.precision, dtype=dtype, grad_clip=t.grad_clip)
    planned = planned_steps(t, per_epoch=len(data.train), done=state.progress.step)
    make_optimizer = functools.partial(build_optimizer, conf.optimizer)
    auto = maybe_decide(
        state.model, make_optimizer, data.train, cfg=conf.compile, recipe=recipe, planned=planned
    )
    auto = distributed.broadcast(ctx, auto)  # every rank follows rank 0's measurement
    compiled = compiling.compile_for_training(
        state.model, state.optimizer, conf.compile, device=device, loader=data.train, auto=auto
    )
    train_model = distributed.wrap(state.model, ctx)  # compiled in place, then wrapped

    tracker = open_tracker(conf, state.config, cfg, layout, ctx.is_main)
    job = Job(
        state=state,
        train_model=train_model,
        data=data,
        ctx=ctx,
        device=device,
        dtype=dtype,
        trainer=t,
        compile_config=conf.compile,
        compiled=compiled,
        auto=auto,
        layout=layout,
        tracker=tracker,
        cpu=threads.record(cpu),
    )
    try:
        fit(job)
        summary = summarise(job, "finished")
        tracker.summary(summary.tracker_values(compiling.summary_for_tracker(summary.compile)))
        tracker.finish()
    except BaseException as err:
        tracker.finish(exit_code=1)
        compiling.raise_if_limit_error(err)
        raise
    if ctx.is_main:
        print_summary(summary)
    return {**summary.metrics, "best": summary.best_value}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_run_data(conf: TrainConfig, device: torch.device, ctx: distributed.Dist) -> DataBundle:
    """This rank's loaders, with inputs shaped as the model wants them."""
    channels, size = input_spec(conf.model)
    return build_data(
        conf.data,
        channels=channels,
        size=size,
        seed=conf.trainer.seed,
        pin_memory=device.type == "cuda",
        rank=ctx.rank,
        world_size=ctx.world_size,
    )


def build_state(conf: TrainConfig, data: DataBundle, device: torch.device) -> TrainState:
    """Model (on `device`), optimizer, schedule, scaler and fresh progress."""
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=data.num_classes, in_channels=in_ch, image_size=height
    ).to(device)
    optimizer = build_optimizer(conf.optimizer, model)
    return TrainState(
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(conf.scheduler, optimizer, max_epochs=conf.trainer.max_epochs),
        scaler=devices.grad_scaler(conf.trainer.precision, device),
        progress=Progress(),
        model_name=conf.model.name,
        num_classes=data.num_classes,
        sample_shape=data.sample_shape,
        config=resolved_config(conf),
    )


def resolved_config(conf: TrainConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(conf), resolve=True)  # type: ignore[return-value]


def open_tracker(
    conf: TrainConfig, resolved: dict[str, Any], cfg: DictConfig, layout: RunLayout, is_main: bool
) -> Tracker:
    """Rank 0's W&B run (after checking a sweep agent's parameters); nothing on other ranks."""
    if not is_main:
        return Tracker(None)
    return start_tracker(
        conf.logger, run_dir=layout.root, flat_config=flatten(resolved), choices=_choices(cfg)
    )


def resolve_run_dir(explicit: str | Path | None) -> Path:
    """`explicit`, else Hydra's run directory of this job."""
    if explicit is not None:
        return Path(explicit)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise ConfigError("run() needs a run directory: call run(cfg, run_dir=...) outside Hydra.")


def _choices(cfg: DictConfig) -> dict[str, Any]:
    """Config-group choices (model=resnet18, ...) of this composition."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        choices = HydraConfig.get().runtime.choices
    elif "hydra" in cfg:  # compose(..., return_hydra_config=True)
        choices = cfg.hydra.runtime.choices
    else:
        return {}
    return {k: v for k, v in choices.items() if not k.startswith("hydra")}


def resume_path(resume: str | None, layout: RunLayout) -> Path | None:
    """The checkpoint trainer.resume names: auto is this run directory's last.pt, if any."""
    if resume is None:
        return None
    if resume == "auto":
        if layout.last.is_file():
            return layout.last
        log.info("trainer.resume=auto: no %s yet, starting from scratch", layout.last)
        return None
    return Path(resume).expanduser()
