"""`run(cfg)`: the one orchestration function. Validates the config, builds data, model and
optimizer, resumes, compiles, trains with evaluation each epoch, checkpoints, logs and
summarises; returns the final metrics."""

from __future__ import annotations

import json
import logging
import random
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from trainer import checkpoint as ckpt
from trainer import compile as compiling
from trainer import compile_auto, cpu_share, distributed
from trainer.config import ConfigError, TrainConfig, TrainerConfig, flatten, validate
from trainer.console import ProgressView, print_summary
from trainer.data import build_data
from trainer.loop import GracefulStop, Progress, evaluate, sync, train_epoch
from trainer.models import build_model, check_name, input_spec
from trainer.tracking import Tracker, start_tracker

log = logging.getLogger(__name__)


class Interrupted(Exception):
    """Training stopped on SIGTERM/SIGINT after saving; `exit_code` is 128 + signal."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


def resolve_device(cfg: TrainerConfig) -> torch.device:
    want = cfg.device
    if want == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.device={want} but torch sees no CUDA device (torch.cuda.is_available() "
                "is False); use trainer.device=auto or trainer.device=cpu."
            )
        index = int(want.split(":")[1]) if ":" in want else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"trainer.device={want} but only {torch.cuda.device_count()} CUDA device(s) "
                "exist; use cuda:0 ... or trainer.device=auto."
            )
    if want == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device=mps but MPS is not available; use trainer.device=auto.")
    return torch.device(want)


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "32":
        return None
    if precision == "bf16-mixed":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"trainer.precision=bf16-mixed but {torch.cuda.get_device_name(device)} cannot "
                "compute in bfloat16; use trainer.precision=16-mixed or trainer.precision=32."
            )
        return torch.bfloat16
    return torch.float16


def build_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    o = cfg.optimizer
    if o.name == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=o.lr,
            momentum=o.momentum,
            nesterov=o.nesterov,
            weight_decay=o.weight_decay,
        )
    return torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay
    )


def build_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer):
    s, epochs = cfg.scheduler, cfg.trainer.max_epochs
    if s.name == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=s.step_size, gamma=s.gamma)
    if s.name == "cosine":
        base = cfg.optimizer.lr
        floor = s.eta_min / base

        def factor(epoch: int) -> float:  # stepped once per epoch
            if epoch < s.warmup_epochs:
                return (epoch + 1) / (s.warmup_epochs + 1)
            span = max(epochs - s.warmup_epochs, 1)
            t = min(epoch - s.warmup_epochs, span) / span
            return floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * t))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _run_dir(explicit: str | Path | None) -> Path:
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


def _resume_path(cfg: TrainerConfig, run_dir: Path) -> Path | None:
    if cfg.resume is None:
        return None
    if cfg.resume == "auto":
        last = run_dir / "checkpoints" / "last.pt"
        if last.is_file():
            return last
        log.info("trainer.resume=auto: no %s yet, starting from scratch", last)
        return None
    return Path(cfg.resume).expanduser()


def run(cfg: DictConfig, *, run_dir: str | Path | None = None) -> dict[str, float]:
    """Train and evaluate as `cfg` says; return the last epoch's metrics plus `best`."""
    conf = validate(cfg)
    t = conf.trainer
    cpu = cpu_share.apply(t.num_threads, conf.data.num_workers)  # before any parallel work
    ctx = distributed.setup(t)  # trainer.strategy=ddp: this rank of torchrun's process group
    out = distributed.agree_run_dir(ctx, _run_dir(run_dir))
    out.mkdir(parents=True, exist_ok=True)
    check_name(conf.model.name)
    device = ctx.device or resolve_device(t)
    dtype = resolve_precision(t.precision, device)
    resolved = OmegaConf.to_container(OmegaConf.structured(conf), resolve=True)
    flat_config = flatten(resolved)  # type: ignore[arg-type]

    compiling.configure_cache(conf.compile)  # before anything compiles
    compiling.reset()
    seed_everything(t.seed)
    channels, size = input_spec(conf.model)
    data = build_data(
        conf.data,
        channels=channels,
        size=size,
        seed=t.seed,
        pin_memory=device.type == "cuda",
        rank=ctx.rank,
        world_size=ctx.world_size,
    )
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=data.num_classes, in_channels=in_ch, image_size=height
    )
    model.to(device)
    optimizer = build_optimizer(conf, model)
    scheduler = build_scheduler(conf, optimizer)
    scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "16-mixed")
    progress = Progress()

    resume_from = _resume_path(t, out)
    if resume_from is not None:
        state = ckpt.load(resume_from)
        ckpt.load_model_state(model, state["model"], source=str(resume_from), key="trainer.resume")
        for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
            if obj is not None and state.get(name) is not None:
                obj.load_state_dict(state[name])
        if "progress" in state:
            progress = Progress(**state["progress"])
            if not ctx.is_main:  # the saved partial sums are global; rank 0 carries them
                progress.partial = {}
        if "rng" in state:
            ckpt.set_rng_state(state["rng"])
        log.info("resumed from %s at epoch %d, step %d", resume_from, progress.epoch, progress.step)

    auto = None
    if conf.compile.auto and not conf.compile.disable:
        planned = max(t.max_epochs * len(data.train) - progress.step, 0)
        if t.max_steps is not None:
            planned = min(planned, max(t.max_steps - progress.step, 0))
        auto = compile_auto.decide(
            model,
            lambda m: build_optimizer(conf, m),
            data.train,
            cfg=conf.compile,
            device=device,
            planned_steps=planned,
        )
        if ctx.world_size > 1:  # every rank follows rank 0's measurement
            shared = [auto]
            torch.distributed.broadcast_object_list(shared, src=0)
            auto = shared[0]
    compiled = not conf.compile.disable and (auto is None or auto["decision"] == "compile")
    if compiled:
        needs_example = conf.compile.explain or conf.compile.fullgraph
        example = None
        if needs_example:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                example = next(iter(data.train))[0].to(device)  # iter() draws a seed
        compiling.apply_compile(model, compile_config=conf.compile, device=device, example=example)
        compiling.maybe_compile_optimizer(optimizer, conf.compile)
    train_model = distributed.wrap(model, ctx)  # compiled in place, then wrapped

    tracker = (
        start_tracker(conf.logger, run_dir=out, flat_config=flat_config, choices=_choices(cfg))
        if ctx.is_main
        else Tracker(None)
    )
    paths = {
        "run_dir": str(out),
        "checkpoint": str(out / "checkpoints" / "last.pt"),
        "best_checkpoint": str(out / "checkpoints" / "best.pt"),
        "summary": str(out / "summary.json"),
        "metrics": str(out / "metrics.jsonl"),
        "wandb_run_dir": tracker.run_dir,
        "wandb_run_id": tracker.run_id,
    }
    timing = {
        "first_step_s": None,
        "steady_step_s": None,
        "eval_first_s": None,
        "eval_steady_s": None,
    }
    started = time.perf_counter()
    timing["loop_started_at"] = time.time()  # wall clock: a sweep agent measures its overhead
    sign = 1.0 if t.monitor_mode == "max" else -1.0

    def save(name: str) -> None:
        if not ctx.is_main:
            return
        ckpt.save(
            out / "checkpoints" / name,
            {
                "model": ckpt.unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": None if scheduler is None else scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "progress": asdict(progress),
                "rng": ckpt.rng_state(),
                "model_name": conf.model.name,
                "num_classes": data.num_classes,
                "sample_shape": list(data.sample_shape),
                "config": resolved,
            },
        )

    def summary(status: str) -> dict[str, Any]:
        last = progress.history[-1] if progress.history else {}
        doc = {
            "status": status,
            "epochs_completed": progress.epoch,
            "steps": progress.step,
            "metrics": last,
            "best": {
                "name": t.monitor,
                "value": progress.best,
                "epoch": progress.best_epoch,
                "mode": t.monitor_mode,
            },
            "perf": {
                "compile_s": last.get("perf/compile_s", 0.0),
                "samples_per_s": last.get("perf/samples_per_s", 0.0),
                "step_ms": last.get("perf/step_ms", 0.0),
                **timing,
                "wall_s": time.perf_counter() - started,
            },
            "compile": {
                **asdict(conf.compile),
                "enabled": compiled,
                **compiling.compile_stats(),
                "auto": auto,
            },
            "device": str(device),
            "strategy": t.strategy,
            "world_size": ctx.world_size,
            "precision": t.precision,
            "cpu": cpu_share.record(cpu),
            "torch": torch.__version__,
            "paths": paths,
            "config": resolved,
        }
        if ctx.is_main:
            (out / "summary.json").write_text(json.dumps(doc, indent=2, default=str))
        return doc

    try:
        with (
            GracefulStop() as signals,
            ProgressView(t.max_epochs, progress.epoch, enabled=ctx.is_main) as view,
        ):
            stop = distributed.AgreedStop(signals, ctx)  # all ranks stop after the same step
            while progress.epoch < t.max_epochs and not stop.requested:
                if t.max_steps is not None and progress.step >= t.max_steps:
                    break
                epoch = progress.epoch
                # Data order depends only on (seed, epoch): a resumed epoch replays the same order.
                data.set_epoch(epoch)
                view.start_epoch(epoch, len(data.train), progress.batches_done)

                def show(n: int, loss: torch.Tensor) -> None:
                    if n % t.log_every_n_steps == 0:  # float() is a CPU-GPU sync point
                        view.step(progress.batches_done, loss.detach().item())

                result = train_epoch(
                    train_model,
                    data.train,
                    optimizer,
                    scaler,
                    progress=progress,
                    device=device,
                    dtype=dtype,
                    grad_clip=t.grad_clip,
                    max_steps=t.max_steps,
                    stop=stop,
                    time_first_step=timing["first_step_s"] is None,
                    on_step=show if view.enabled else None,
                )
                if result is None:
                    break
                means, _ = distributed.reduce_mean(
                    ctx, {"loss": result.loss, "acc": result.acc}, result.samples, device
                )
                if result.first_step_s is not None:
                    timing["first_step_s"] = result.first_step_s
                steady = result.steady_s / result.steady_steps if result.steady_steps else None
                if steady is not None and timing["steady_step_s"] is None:
                    timing["steady_step_s"] = steady
                ev = evaluate(  # the inner module: ranks see different numbers of val batches
                    model, data.val, device=device, dtype=dtype, batch_size=data.eval_batch_size
                )
                val, _ = distributed.reduce_mean(
                    ctx, {"loss": ev.loss, "acc": ev.acc}, ev.samples, device
                )
                if timing["eval_first_s"] is None:
                    timing["eval_first_s"], timing["eval_steady_s"] = (
                        ev.first_batch_s,
                        ev.steady_batch_s,
                    )
                compile_s = 0.0
                if timing["first_step_s"] is not None and timing["steady_step_s"] is not None:
                    compile_s = max(timing["first_step_s"] - timing["steady_step_s"], 0.0)
                    compile_s += max(timing["eval_first_s"] - timing["eval_steady_s"], 0.0)
                step_s = steady if steady is not None else (timing["steady_step_s"] or 0.0)
                metrics = {
                    "epoch": epoch + 1,
                    "train/loss": means["loss"],
                    "train/acc": means["acc"],
                    "val/loss": val["loss"],
                    "val/acc": val["acc"],
                    "train/lr": float(optimizer.param_groups[0]["lr"]),
                    "perf/compile_s": compile_s,
                    "perf/step_ms": step_s * 1000.0,
                    "perf/samples_per_s": data.train_batch_size / step_s if step_s else 0.0,
                    "perf/epoch_s": result.steady_s + (result.first_step_s or 0.0),
                }
                if scheduler is not None:
                    scheduler.step()
                progress.epoch += 1
                progress.batches_done = 0
                progress.history.append(metrics)
                value = metrics[t.monitor]
                improved = progress.best is None or sign * value > sign * progress.best
                if improved:
                    progress.best, progress.best_epoch = value, epoch + 1
                save("last.pt")
                if improved:
                    save("best.pt")
                if ctx.is_main:
                    with open(out / "metrics.jsonl", "a") as handle:
                        handle.write(json.dumps(metrics) + "\n")
                tracker.log(metrics)
                view.end_epoch(metrics)
                log.info(
                    "epoch %d/%d  train/loss %.4f  train/acc %.4f  val/loss %.4f  val/acc %.4f  "
                    "%.0f samples/s",
                    epoch + 1,
                    t.max_epochs,
                    metrics["train/loss"],
                    metrics["train/acc"],
                    metrics["val/loss"],
                    metrics["val/acc"],
                    metrics["perf/samples_per_s"],
                )
            if stop.requested:
                sync(device)
                # This epoch's running sums, over all ranks (every rank takes part).
                names = ("loss", "correct", "count")
                sums = distributed.reduce_sums(
                    ctx, [progress.partial.get(k, 0.0) for k in names], device
                )
                progress.partial = dict(zip(names, sums, strict=True)) if sums[2] else {}
                save("last.pt")
                doc = summary("interrupted")
                tracker.summary({"status": "interrupted"})
                tracker.finish(exit_code=128 + stop.signum)  # type: ignore[operator]
                name = signal.Signals(stop.signum).name  # type: ignore[arg-type]
                raise Interrupted(
                    stop.signum,  # type: ignore[arg-type]
                    f"{name} received: stopped at epoch {progress.epoch + 1}, step {progress.step}; "
                    f"saved {doc['paths']['checkpoint']}. Resume with the same command plus "
                    f"hydra.run.dir={out} trainer.resume=auto",
                )
        doc = summary("finished")
        tracker.summary(
            {
                f"best/{t.monitor}": progress.best,
                "perf/compile_s": doc["perf"]["compile_s"],
                **compiling.summary_for_tracker(doc["compile"]),
            }
        )
        tracker.finish()
    except BaseException as err:
        tracker.finish(exit_code=1)
        compiling.raise_if_limit_error(err)
        raise
    if ctx.is_main:
        print_summary(doc)
    return {**{k: v for k, v in doc["metrics"].items()}, "best": progress.best}
