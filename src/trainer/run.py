"""`run(cfg)`: the one orchestration function. Validate, set up, build, restore, compile, fit,
finish; each step lives in the module that owns its data."""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from trainer import compiling
from trainer.cache.session import close_session, open_session
from trainer.cache.workload import label as workload_label
from trainer.compiling import trace
from trainer.config.schema import ConfigError, TrainConfig, flatten
from trainer.data.plan import DataBundle, DataPlan, Placement, build_data, plan_data
from trainer.hardware import devices, distributed, threads
from trainer.outputs.console import print_summary
from trainer.outputs.layout import RunLayout
from trainer.outputs.tracking import Tracker, start_tracker
from trainer.preflight import validate
from trainer.train import pbt, speed
from trainer.train.checkpoint import TrainState
from trainer.train.compile_auto import StepRecipe, maybe_decide, planned_steps
from trainer.train.ema import maybe_average
from trainer.train.fit import FitPlan, Interrupted, finish, fit
from trainer.train.models import build_model, input_spec
from trainer.train.optim import build_optimizer, build_scheduler
from trainer.train.resume import Resumed, restore
from trainer.train.step import Progress
from trainer.train.warm_only import warm_only

__all__ = ["Interrupted", "resolve_run_dir", "run"]

log = logging.getLogger(__name__)


def run(cfg: DictConfig, *, run_dir: str | Path | None = None) -> dict[str, float]:
    """Train and evaluate as `cfg` says; return the last epoch's metrics plus `best`."""
    conf = validate(cfg)  # every check that needs no data, before anything is built
    t = conf.trainer
    plan = plan_data(conf.data, *input_spec(conf.model))  # memory or stream: no decoding yet
    cpu = threads.apply(t.num_threads, plan.workers)  # before any parallel work
    ctx = distributed.setup(t)  # trainer.strategy=ddp: this rank of torchrun's process group
    layout = RunLayout(distributed.agree_run_dir(ctx, resolve_run_dir(run_dir)))
    layout.root.mkdir(parents=True, exist_ok=True)
    device = ctx.device or devices.resolve_device(t.device)
    dtype = devices.resolve_precision(t.precision, device)
    flags = speed.apply_backend_flags(tf32=t.tf32, cudnn_benchmark=t.cudnn_benchmark, device=device)
    close_cache, workload = open_compile_cache(conf, layout, device, is_main=ctx.is_main)
    compiling.reset()
    seed_everything(t.seed)

    data = build_run_data(conf, device, ctx, plan)
    state = build_state(conf, data, device)
    resumed = restore(state, t, layout, is_main=ctx.is_main)  # None: a fresh start
    if resumed is not None and resumed.done:
        return resumed.already_done(state.progress)
    composed = flatten(state.config)  # the sweep's values, before a PBT member's lineage's
    member = pbt.joined(layout, ctx.world_size, state, t)  # a PBT sweep's trial: else None
    compiled, auto = compile_model(conf, state, data, device, dtype, ctx)
    if conf.compile.warm_only:  # compile into the cache and the bundle, train nothing
        return warm_only(
            conf, state, data, layout, close_cache, device=device, dtype=dtype, workload=workload
        )
    train_model = distributed.wrap(state.model, ctx)  # compiled in place, then wrapped

    tracker = open_tracker(conf, composed, cfg, layout, ctx.is_main, resumed)
    fit_plan = FitPlan(
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
        speed=speed.record(flags, data.train.transform, state.optimizer),
        close_cache=close_cache,
        member=member,
    )
    try:
        fit(fit_plan)
        summary = finish(fit_plan)
    except BaseException as err:
        tracker.finish(exit_code=1)
        compiling.raise_if_limit_error(err)
        raise
    if ctx.is_main:
        print_summary(summary)
    return {**summary.metrics, "best": summary.best_value}


def open_compile_cache(
    conf: TrainConfig, layout: RunLayout, device: torch.device, *, is_main: bool
) -> tuple[Callable[[dict[str, Any], Any], dict[str, Any] | None], str]:
    """Before anything compiles: point Inductor at compile.cache_dir, start compile.trace
    (ended when the cache closes), and open the run's compile-cache session. Returns the
    function that closes it (with the run's compile stats and W&B run: the summary's
    compile.cache section) and the name of what compiles (its workload)."""
    trace.abandon()  # a previous run of this process (tests, multiruns) is over
    root = compiling.configure_cache(conf.compile)
    session = open_session(conf, layout, device, root, is_main=is_main)
    if conf.compile.trace and not conf.compile.disable:
        trace.start(layout)
        session.on_close.append(lambda: trace.finish(layout))
    return functools.partial(close_session, session), (
        workload_label(session.work) if session.work else conf.model.name
    )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_run_data(
    conf: TrainConfig, device: torch.device, ctx: distributed.Dist, plan: DataPlan | None = None
) -> DataBundle:
    """This rank's batches, on `device`, with inputs shaped as the model wants them."""
    channels, size = input_spec(conf.model)
    return build_data(
        conf.data,
        channels=channels,
        size=size,
        seed=conf.trainer.seed,
        placement=Placement(
            device=device,
            rank=ctx.rank,
            world_size=ctx.world_size,
            pin_memory=device.type == "cuda",
        ),
        plan=plan,
    )


def build_state(conf: TrainConfig, data: DataBundle, device: torch.device) -> TrainState:
    """Model (on `device`, channels-last where it helps), optimizer, schedule, scaler, EMA,
    augmentation generators and fresh progress."""
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=data.num_classes, in_channels=in_ch, image_size=height
    ).to(device)
    if speed.maybe_channels_last(model, conf.trainer.channels_last, device):
        data.set_memory_format(torch.channels_last)
    optimizer = build_optimizer(conf.optimizer, model, compiled_step=_compiled_step(conf))
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
        ema=maybe_average(model, conf.trainer.ema),
        augment=data.train.transform.augment,
    )


def _compiled_step(conf: TrainConfig) -> bool:
    return conf.compile.optimizer and not conf.compile.disable


def compile_model(conf, state, data, device, dtype, ctx) -> tuple[bool, dict[str, Any] | None]:
    """compile=auto's measurement (rank 0's, for every rank), then torch.compile in place as the
    compile group says; both look at un-augmented batches (training's random stream stays)."""
    t = conf.trainer
    recipe = StepRecipe(
        device, precision=t.precision, dtype=dtype, grad_clip=t.grad_clip,
        label_smoothing=t.label_smoothing,
    )  # fmt: skip
    planned = planned_steps(t, per_epoch=len(data.train), done=state.progress.step)
    make = functools.partial(build_optimizer, conf.optimizer, compiled_step=_compiled_step(conf))
    sample = data.train.plain()
    auto = maybe_decide(state.model, make, sample, cfg=conf.compile, recipe=recipe, planned=planned)
    auto = distributed.broadcast(ctx, auto)  # every rank follows rank 0's measurement
    compiled = compiling.compile_for_training(
        state.model, state.optimizer, conf.compile, device=device, loader=sample, auto=auto
    )
    return compiled, auto


def resolved_config(conf: TrainConfig) -> dict[str, Any]:
    """The run's typed config as plain dicts and lists (what checkpoints and the summary keep):
    `conf` is resolved already (preflight), so a dataclass copy is the whole conversion (0.3 ms;
    OmegaConf's round trip took 18 ms of each trial's start-up)."""
    return dataclasses.asdict(conf)


def open_tracker(
    conf: TrainConfig,
    flat_config: dict[str, Any],
    cfg: DictConfig,
    layout: RunLayout,
    is_main: bool,
    resumed: Resumed | None = None,
) -> Tracker:
    """Rank 0's W&B run (after checking a sweep agent's parameters); nothing on other ranks. A
    resumed run continues the interrupted run's W&B run."""
    if not is_main:
        return Tracker(None)
    return start_tracker(
        conf.logger,
        run_dir=layout.root,
        flat_config=flat_config,
        choices=_choices(cfg),
        resume_id=None if resumed is None else resumed.wandb_id,
    )


def resolve_run_dir(explicit: str | Path | None) -> Path:
    """`explicit`, else Hydra's run directory of this fit_plan."""
    if explicit is not None:
        return Path(explicit)

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise ConfigError("run() needs a run directory: call run(cfg, run_dir=...) outside Hydra.")


def _choices(cfg: DictConfig) -> dict[str, Any]:
    """Config-group choices (model=resnet18, ...) of this composition."""
    if HydraConfig.initialized():
        choices = HydraConfig.get().runtime.choices
    elif "hydra" in cfg:  # compose(..., return_hydra_config=True)
        choices = cfg.hydra.runtime.choices
    else:
        return {}
    return {k: v for k, v in choices.items() if not k.startswith("hydra")}
