"""Typed schemas of the run configuration and their checks.

`validate(cfg)` turns the composed Hydra config into `TrainConfig`; every problem becomes a
`ConfigError` whose message names the override that fixes it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trainer.errors import TrainerError

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
DEVICES = ("auto", "cpu", "cuda", "mps")
DATASETS = ("digits", "fake", "cifar10", "mnist", "fashion_mnist", "imagefolder")
OPTIMIZERS = ("sgd", "adamw")
SCHEDULERS = ("none", "cosine", "step")
LOGGER_MODES = ("offline", "online", "disabled")
STRATEGIES = ("single", "ddp")
COMPILE_TARGETS = ("model", "blocks")


class ConfigError(TrainerError, ValueError):
    """A configuration problem; the message says which override fixes it (exit code 2)."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _one_of(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" Did you mean {key}={close[0]}?" if close else ""
        raise ConfigError(
            f"{key}={value!r} is not supported; choose one of {', '.join(allowed)}.{hint}"
        )


def _positive(key: str, value: float | int | None) -> None:
    _check(value is None or value > 0, f"{key} must be positive, got {value}; set {key}=<n > 0>.")


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


@dataclass
class PathsConfig:
    output_dir: str = "outputs"  # Hydra run and multirun trees, sweep stores
    data_dir: str = "data"  # default root of torchvision data sets
    cache_dir: str = "~/.cache/compiled-trainer"  # compile caches shared by every run


@dataclass
class DataConfig:
    name: str = "digits"  # digits | fake | cifar10 | mnist | fashion_mnist | imagefolder
    root: str | None = None  # folder of a torchvision or ImageFolder data set
    download: bool = False  # fetch a torchvision data set into root (needs network)
    batch_size: int = 64  # samples per optimizer step, over all ranks (ddp: divisible by them)
    eval_batch_size: int | None = None  # samples per evaluation step, over all ranks
    num_workers: int = 0  # DataLoader worker processes
    val_fraction: float = 0.2  # share held out for validation where the set has no split
    split_seed: int = 0  # seed of the train/val split
    num_samples: int = 1024  # fake: training images (validation gets a quarter)
    image_shape: list[int] = field(default_factory=lambda: [3, 32, 32])  # fake: C, H, W
    num_classes: int = 10  # fake: classes

    def __post_init__(self) -> None:
        _one_of("data", self.name, DATASETS)
        _positive("data.batch_size", self.batch_size)
        _positive("data.eval_batch_size", self.eval_batch_size)
        _check(self.num_workers >= 0, "data.num_workers must be >= 0.")
        _check(
            0.0 < self.val_fraction < 1.0,
            f"data.val_fraction={self.val_fraction} must lie strictly between 0 and 1.",
        )
        _positive("data.num_samples", self.num_samples)
        _positive("data.num_classes", self.num_classes)
        _check(
            len(self.image_shape) == 3 and all(int(s) > 0 for s in self.image_shape),
            f"data.image_shape={list(self.image_shape)} must be [channels, height, width].",
        )


@dataclass
class ModelConfig:
    name: str = "small_cnn"  # built-in name or any torchvision classification model
    in_channels: int | None = None  # channels the model expects (None: the data's own)
    image_size: int | None = None  # square input size in pixels (None: the data's own)
    width: int = 32  # small_cnn: channels of the first convolution
    kwargs: dict[str, Any] = field(default_factory=dict)  # extra builder arguments

    def __post_init__(self) -> None:
        _positive("model.in_channels", self.in_channels)
        _positive("model.image_size", self.image_size)
        _positive("model.width", self.width)


@dataclass
class OptimizerConfig:
    name: str = "sgd"  # sgd | adamw
    lr: float = 0.05  # learning rate
    weight_decay: float = 0.0  # L2 (sgd) or decoupled (adamw) weight decay
    momentum: float = 0.9  # sgd only
    nesterov: bool = False  # sgd only
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # adamw only
    eps: float = 1e-8  # adamw only

    def __post_init__(self) -> None:
        _one_of("optimizer", self.name, OPTIMIZERS)
        _positive("optimizer.lr", self.lr)
        _check(self.weight_decay >= 0, "optimizer.weight_decay must be >= 0.")


@dataclass
class SchedulerConfig:
    name: str = "none"  # none | cosine | step
    eta_min: float = 0.0  # cosine: final learning rate
    warmup_epochs: int = 0  # cosine: linear warm-up epochs
    step_size: int = 10  # step: epochs between decays
    gamma: float = 0.1  # step: decay factor

    def __post_init__(self) -> None:
        _one_of("scheduler", self.name, SCHEDULERS)
        _check(self.warmup_epochs >= 0, "scheduler.warmup_epochs must be >= 0.")
        _positive("scheduler.step_size", self.step_size)


@dataclass
class CompileConfig:
    disable: bool = False  # true: train eagerly
    mode: str | None = "default"  # torch.compile mode (any of torch._inductor.list_mode_options())
    backend: str = (
        "inductor"  # torch.compile backend (torch._dynamo.list_backends(exclude_tags=()))
    )
    backend_module: str | None = None  # module imported first; it may register a custom backend
    dynamic: bool | None = None  # dynamic shapes: None lets Dynamo decide
    fullgraph: bool = False  # error on graph breaks
    options: dict[str, Any] | None = None  # Inductor options (only with mode=default)
    cache_dir: str | None = None  # persistent compile caches (None: torch's own default)
    target: str = "model"  # model: whole model | blocks: each repeated block, in place
    optimizer: bool = False  # compile the optimizer step too (learning rates become tensors)
    explain: bool = False  # print torch._dynamo.explain for one batch before training
    fail_on_recompile_limit: bool = False  # hitting Dynamo's recompile limit is an error
    auto: bool = False  # measure eager vs compiled on a few steps, keep the faster
    auto_steps: int = 5  # compile.auto: timed steps each way (after one warm-up step)

    def __post_init__(self) -> None:
        _check(
            not (self.options and self.mode not in (None, "default")),
            f"compile.options and compile.mode={self.mode} cannot be combined (torch.compile "
            "accepts one or the other); drop the options or set compile.mode=default.",
        )
        _one_of("compile.target", self.target, COMPILE_TARGETS)
        _positive("compile.auto_steps", self.auto_steps)


@dataclass
class TrainerConfig:
    max_epochs: int = 8  # full passes over the training set
    max_steps: int | None = None  # optional cap on optimizer steps
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed
    seed: int = 0  # model init, data order
    grad_clip: float | None = None  # max gradient norm
    resume: str | None = None  # None | auto | checkpoint path
    monitor: str = "val/acc"  # metric that selects best.pt
    monitor_mode: str = "max"  # max | min
    log_every_n_steps: int = 10  # steps between progress refreshes
    strategy: str = "single"  # single | ddp (one process per device, launched by torchrun)
    num_threads: Any = "auto"  # torch threads: auto (the CPUs this process may use) | n

    def __post_init__(self) -> None:
        from trainer.cpu_share import check_num_threads  # noqa: PLC0415 (imports this module)

        check_num_threads(self.num_threads)
        _positive("trainer.max_epochs", self.max_epochs)
        _positive("trainer.max_steps", self.max_steps)
        _positive("trainer.grad_clip", self.grad_clip)
        _positive("trainer.log_every_n_steps", self.log_every_n_steps)
        _one_of("trainer.precision", self.precision, PRECISIONS)
        _one_of("trainer.monitor_mode", self.monitor_mode, ("max", "min"))
        _one_of("trainer.strategy", self.strategy, STRATEGIES)
        base = self.device.split(":")[0]
        _one_of("trainer.device", base, DEVICES)
        if ":" in self.device:
            _check(
                base == "cuda" and self.device.split(":")[1].isdigit(),
                f"trainer.device={self.device} is not a device; use cuda:N with N a GPU index.",
            )
        from trainer.metrics import EPOCH_METRICS  # noqa: PLC0415 (no torch import)

        _one_of("trainer.monitor", self.monitor, EPOCH_METRICS)


@dataclass
class LoggerConfig:
    enabled: bool = True  # false: no W&B run at all (logger=none)
    mode: str = "offline"  # offline | online | disabled; WANDB_MODE wins when set
    project: str = "compiled-trainer"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    name: str | None = None  # run name

    def __post_init__(self) -> None:
        _one_of("logger.mode", self.mode, LOGGER_MODES)


@dataclass
class TrainConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


# Keys of the composed config that belong to Hydra plumbing, not to the run.
_NOT_RUN_KEYS = ("hydra", "sweep")


def validate(cfg: DictConfig) -> TrainConfig:
    """Check the composed config against the schemas; raise `ConfigError` on any problem."""
    plain = OmegaConf.create(
        {k: v for k, v in cfg.items() if k not in _NOT_RUN_KEYS} if cfg else {}
    )
    missing = sorted(OmegaConf.missing_keys(plain))
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} must be set (the config marks it ???); add "
            f"{missing[0]}=<value> to the command line."
        )
    try:
        OmegaConf.resolve(plain)
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), plain)
        result = OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(_omegaconf_message(key, err)) from None
    assert isinstance(result, TrainConfig)
    return result


def _omegaconf_message(key: str, err: OmegaConfBaseException) -> str:
    text = str(err).splitlines()[0]
    if "MissingMandatoryValue" in type(err).__name__:
        return f"{key} is required but not set; add {key}=<value> to the command line."
    if "not in struct" in text or "Key '" in text and "not in" in text:
        group, _, leaf = key.rpartition(".")
        fields = _fields_of(group)
        close = difflib.get_close_matches(leaf, fields, n=1)
        hint = f" Did you mean {group}.{close[0]}?" if close else ""
        return (
            f"{key} is not a known setting.{hint} Known keys under {group or 'the root'}: "
            f"{', '.join(fields)}."
        )
    return f"{key}: {text}. Fix the value given for {key} (on the command line or in conf/)."


def _fields_of(group: str) -> list[str]:
    node: Any = OmegaConf.structured(TrainConfig)
    for part in filter(None, group.split(".")):
        node = node.get(part)
        if not isinstance(node, DictConfig):
            return []
    return [str(k) for k in node]


@dataclass
class EvalConfig:
    """The `eval` section of conf/evaluate.yaml (`python -m trainer.evaluate`)."""

    warmup: int = 3  # forward passes after the first call, before timing
    steps: int = 50  # timed forward passes, cycling over the validation batches
    batch_size: int | None = None  # samples per pass (None: the data's evaluation batch size)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed

    def __post_init__(self) -> None:
        _check(self.warmup >= 0, f"eval.warmup={self.warmup} must be >= 0; set eval.warmup=3.")
        _positive("eval.steps", self.steps)
        _positive("eval.batch_size", self.batch_size)
        _one_of("eval.precision", self.precision, PRECISIONS)
        _one_of("eval.device", self.device.split(":")[0], DEVICES)
