"""`python -m trainer.evaluate checkpoint=<path>`: inference from a checkpoint. Loads it into a
fresh model, compiles it per the `compile` group, warms up, then measures first-call latency,
steady p50/p95 latency, throughput and validation accuracy; writes `evaluation.json`."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from trainer.config.hydra_version import VERSION_BASE
from trainer.config.overrides import EVALUATE, check_overrides
from trainer.config.paths import conf_dir, expand_path_argv
from trainer.config.schema import ConfigError, EvalConfig, TrainConfig
from trainer.errors import exit_on_error
from trainer.outputs.layout import write_text_atomic

REPORT = "evaluation.json"  # in the evaluation's run directory
# torch and the training modules are imported inside the functions that use them: 2.5 s at
# start-up that --help and a refused override (exit 2) do without.


def _eval_config(cfg: DictConfig) -> EvalConfig:
    section = OmegaConf.to_container(cfg.get("eval") or {}, resolve=True)
    try:
        return EvalConfig(**section)  # type: ignore[arg-type]
    except TypeError as err:
        known = ", ".join(EvalConfig.__dataclass_fields__)
        raise ConfigError(f"eval: {err}; the known keys of eval are {known}.") from None


def _run_config(cfg: DictConfig, stored: dict[str, Any], ev: EvalConfig) -> TrainConfig:
    """The training config stored in the checkpoint, with this command's compile group, device,
    precision and (when given) data group in place of the stored ones."""
    # lazy: torch and the training modules (the note at the top)
    from trainer.preflight import validate

    merged = OmegaConf.create(stored)
    merged.compile = cfg.compile
    merged.paths = cfg.paths
    if cfg.get("data") is not None:
        merged.data = cfg.data
    if ev.batch_size is not None:
        merged.data.eval_batch_size = ev.batch_size
    merged.trainer.device = ev.device
    merged.trainer.precision = ev.precision
    return validate(merged)


def _load(cfg: DictConfig) -> tuple[str, EvalConfig, dict[str, Any], TrainConfig]:
    """The checkpoint (loaded with weights_only=True), the eval section and the run config."""
    # lazy: torch and the training modules (the note at the top)
    from trainer.train import checkpoint as ckpt

    if OmegaConf.is_missing(cfg, "checkpoint") or not cfg.checkpoint:
        raise ConfigError(
            "checkpoint must be set: python -m trainer.evaluate checkpoint=<run dir>/checkpoints/"
            "last.pt (or best.pt)."
        )
    source = str(cfg.checkpoint)
    ev = _eval_config(cfg)
    state = ckpt.load(source, key="checkpoint")
    if not isinstance(state.get("config"), dict) or "num_classes" not in state:
        raise ConfigError(
            f"checkpoint={source} holds no training config or class count; evaluate a "
            "checkpoint written by python -m trainer (checkpoints/last.pt or best.pt)."
        )
    return source, ev, state, _run_config(cfg, state["config"], ev)


def _build(conf: TrainConfig, state: dict[str, Any], source: str, device: Any):
    """The validation data and the checkpoint's model on `device`, in eval mode."""
    # lazy: torch and the training modules (the note at the top)
    import torch

    from trainer.data.plan import Placement, build_data
    from trainer.train import checkpoint as ckpt
    from trainer.train import speed
    from trainer.train.models import build_model, input_spec

    channels, size = input_spec(conf.model)
    data = build_data(
        conf.data,
        channels=channels,
        size=size,
        seed=0,
        placement=Placement(device=device, pin_memory=True),
    )
    if data.num_classes != state["num_classes"]:
        raise ConfigError(
            f"data={conf.data.name} has {data.num_classes} classes but checkpoint={source} was "
            f"trained on {state['num_classes']}; pick the data set it was trained on (or drop "
            "the data= override to use the one stored in the checkpoint)."
        )
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=state["num_classes"], in_channels=in_ch, image_size=height
    )
    # a run with trainer.ema measured val/* on the average: evaluate those weights too
    weights = state["ema"] if state.get("ema") is not None else state["model"]
    ckpt.load_model_state(model, weights, source=source, key="checkpoint")
    model = model.to(device).eval()
    if speed.maybe_channels_last(model, conf.trainer.channels_last, device):
        data.set_memory_format(torch.channels_last)
    return data, model


def measure_latency(model, batches: list, *, device, dtype, warmup: int, steps: int):
    """(first call s, tensor of `steps` steady call seconds) of forward passes over `batches`,
    each under no_grad and autocast (the graph step.evaluate runs), bracketed by syncs."""
    # lazy: torch and the training modules (the note at the top)
    import torch

    from trainer.train.step import autocast, sync

    feed = itertools.cycle(batches)

    def forward() -> float:
        x = next(feed)
        sync(device)
        start = time.perf_counter()
        with torch.no_grad(), autocast(device, dtype):
            model(x)
        sync(device)
        return time.perf_counter() - start

    first_call = forward()  # pays for compilation
    for _ in range(warmup):
        forward()
    return first_call, torch.tensor([forward() for _ in range(steps)], dtype=torch.float64)


def evaluate_checkpoint(cfg: DictConfig, *, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Evaluate `cfg.checkpoint` as `cfg` says; return (and write) the report."""
    # lazy: torch and the training modules (the note at the top)
    from trainer import compiling
    from trainer.hardware import devices
    from trainer.outputs.console import print_evaluation
    from trainer.run import resolve_run_dir
    from trainer.train import speed
    from trainer.train.step import evaluate, pad_batch

    source, ev, state, conf = _load(cfg)
    out = resolve_run_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = devices.resolve_device(ev.device, key="eval.device")
    dtype = devices.resolve_precision(ev.precision, device, key="eval.precision")
    t = conf.trainer
    speed.apply_backend_flags(tf32=t.tf32, cudnn_benchmark=t.cudnn_benchmark, device=device)
    compiling.reset()
    data, model = _build(conf, state, source, device)
    compiling.apply_compile(model, compile_config=conf.compile)
    batch_size = data.eval_batch_size
    # padded to one shape, so a compiled model compiles once
    batches = [pad_batch(x, y, batch_size)[0].to(device) for x, y in data.val]
    first_call, times = measure_latency(
        model, batches, device=device, dtype=dtype, warmup=ev.warmup, steps=ev.steps
    )
    result = evaluate(model, data.val, device=device, dtype=dtype, batch_size=batch_size)
    report = _report(source, conf, ev, device, batch_size, first_call, times, result)
    report["weights"] = "ema" if state.get("ema") is not None else "model"  # trainer.ema's
    report["paths"] = {"run_dir": str(out), "report": str(out / REPORT)}
    write_text_atomic(out / REPORT, json.dumps(report, indent=2))
    print_evaluation(report)
    return report


def _report(source, conf, ev, device, batch_size, first_call, times, result) -> dict[str, Any]:
    # lazy: torch and the training modules (the note at the top)
    import torch

    from trainer import compiling

    ms = times * 1000.0
    return {
        "checkpoint": str(Path(source).expanduser().resolve()),
        "model": conf.model.name,
        "data": conf.data.name,
        "device": str(device),
        "precision": ev.precision,
        "batch_size": batch_size,
        "warmup": ev.warmup,
        "steps": ev.steps,
        "latency_ms": {
            "first_call": first_call * 1000.0,
            "p50": float(ms.quantile(0.5)),
            "p95": float(ms.quantile(0.95)),
            "mean": float(ms.mean()),
            "min": float(ms.min()),
        },
        "samples_per_s": batch_size * ev.steps / float(times.sum()),
        "val/acc": result.acc,
        "val/loss": result.loss,
        "val/samples": result.samples,
        "compile": {
            "enabled": not conf.compile.disable,
            "backend": conf.compile.backend,
            "mode": conf.compile.mode,
            **compiling.compile_stats(),
        },
        "torch": torch.__version__,
    }


@hydra.main(config_path=conf_dir(), config_name="evaluate", **VERSION_BASE)
@exit_on_error
def main(cfg: DictConfig) -> None:
    evaluate_checkpoint(cfg)


@exit_on_error
def _check_overrides(argv: list[str]) -> None:
    check_overrides(argv, EVALUATE)  # a typo'd key or group option: our paragraph, not Hydra's


if __name__ == "__main__":
    sys.argv = expand_path_argv(sys.argv)  # `~`, `$HOME` in checkpoint= and the path keys
    _check_overrides(sys.argv)
    main()
