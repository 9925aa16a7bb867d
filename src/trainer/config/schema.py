"""Typed schemas of the run configuration and their checks.

`trainer.preflight.validate(cfg)` turns the composed Hydra config into `TrainConfig`; every problem becomes a
`ConfigError` whose message names the override that fixes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from trainer.config.rules import ConfigError, auto_or_count, flatten  # noqa: F401 (re-exported)
from trainer.config.rules import check as _check
from trainer.config.rules import one_of as _one_of
from trainer.config.rules import positive as _positive

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
DEVICES = ("auto", "cpu", "cuda", "mps")
DATASETS = ("digits", "fake", "cifar10", "mnist", "fashion_mnist", "imagefolder")
OPTIMIZERS = ("sgd", "adamw")
OPTIMIZER_KERNELS = ("auto", "fused", "foreach", "for-loop")
SCHEDULERS = ("none", "cosine", "step")
LOGGER_MODES = ("offline", "online", "disabled")
STRATEGIES = ("single", "ddp")
COMPILE_TARGETS = ("model", "blocks")
AUGMENTS = ("none", "standard", "strong")
PIPELINES = ("auto", "memory", "stream")


# Environment variables override each directory; relative paths are relative to the working dir.
_OUTPUT_DIR = "${oc.env:TRAINER_OUTPUT_DIR,outputs}"
_DATA_DIR = "${oc.env:TRAINER_DATA_DIR,data}"
_CACHE_DIR = (
    "${oc.env:TRAINER_CACHE_DIR,${oc.env:XDG_CACHE_HOME,${oc.env:HOME,.}/.cache}/compiled-trainer}"
)


# The metrics a run logs once per epoch (the names `trainer.monitor` and a sweep's `metric.name`
# may take; an epoch is one W&B "iteration" for hyperband).
EPOCH_METRICS: tuple[str, ...] = (
    "train/loss",
    "train/acc",
    "val/loss",
    "val/acc",
    "perf/compile_s",
    "perf/samples_per_s",
    "perf/step_ms",
    "perf/epoch_s",
    "train/lr",
)


@dataclass
class PathsConfig:
    output_dir: str = _OUTPUT_DIR  # runs, multiruns, sweeps ($TRAINER_OUTPUT_DIR)
    data_dir: str = _DATA_DIR  # default root of torchvision data sets ($TRAINER_DATA_DIR)
    cache_dir: str = _CACHE_DIR  # compile caches shared by every run ($TRAINER_CACHE_DIR)


@dataclass
class DataConfig:
    name: str = "digits"  # digits | fake | cifar10 | mnist | fashion_mnist | imagefolder
    root: str | None = None  # folder that holds (or receives) a torchvision or ImageFolder set
    download: bool = False  # fetch a torchvision data set into root (needs network)
    batch_size: int = 64  # samples per optimizer step, over all ranks (ddp: divisible by them)
    eval_batch_size: int | None = None  # samples per evaluation step, over all ranks
    num_workers: Any = "auto"  # streamed sets' DataLoader workers: auto (CPU share - 1, <= 8) | n
    pipeline: str = "auto"  # auto (memory when it fits in_memory_max_mb) | memory | stream
    in_memory_max_mb: int = 2048  # pipeline=auto: decoded uint8 size (MB) kept on the device
    augment: str = "none"  # training batches only: none | standard | strong (per data set)
    val_fraction: float = 0.2  # share held out where the set has no split
    split_seed: int = 0  # seed of the train/val split, independent of trainer.seed
    num_samples: int = 1024  # fake: training images (validation gets a quarter)
    image_shape: list[int] = field(default_factory=lambda: [3, 32, 32])  # fake: C, H, W
    num_classes: int = 10  # fake: classes

    def __post_init__(self) -> None:
        _one_of("data", self.name, DATASETS)
        _check(
            self.name != "imagefolder" or bool(self.root),
            "data=imagefolder needs the folder of its images; add data.root=/path/to/images "
            "(laid out as <root>/<class>/<image>).",
        )
        _positive("data.batch_size", self.batch_size)
        _positive("data.eval_batch_size", self.eval_batch_size)
        auto_or_count("data.num_workers", self.num_workers, minimum=0, example="e.g. 4")
        _one_of("data.pipeline", self.pipeline, PIPELINES)
        _positive("data.in_memory_max_mb", self.in_memory_max_mb)
        _one_of("data.augment", self.augment, AUGMENTS)
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
    in_channels: int | None = None  # channels fed to the model (None: the data's)
    image_size: int | None = None  # square input size in pixels; inputs are resized (None: native)
    width: int = 32  # small_cnn: channels of the first convolution (doubled in the second)
    kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments of the builder

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
    kernel: str = "auto"  # auto (fused where torch has it, foreach under compile.optimizer) | fused | foreach | for-loop

    def __post_init__(self) -> None:
        _one_of("optimizer", self.name, OPTIMIZERS)
        _positive("optimizer.lr", self.lr)
        _check(self.weight_decay >= 0, "optimizer.weight_decay must be >= 0.")
        _one_of("optimizer.kernel", self.kernel, OPTIMIZER_KERNELS)


@dataclass
class SchedulerConfig:
    name: str = "none"  # none | cosine | step
    eta_min: float = 0.0  # cosine: final learning rate
    warmup_epochs: int = 0  # cosine: linear warm-up epochs
    step_size: int = 10  # step: epochs between decays
    gamma: float = 0.1  # step: factor applied to the learning rate every step_size epochs

    def __post_init__(self) -> None:
        _one_of("scheduler", self.name, SCHEDULERS)
        _check(self.warmup_epochs >= 0, "scheduler.warmup_epochs must be >= 0.")
        _positive("scheduler.step_size", self.step_size)


@dataclass
class CompileConfig:
    disable: bool = False  # true: train eagerly
    mode: str | None = "default"  # default | reduce-overhead | max-autotune(-no-cudagraphs) | lite
    backend: str = "inductor"  # any of torch.compiler.list_backends(exclude_tags=())
    backend_module: str | None = None  # module imported first; it may register a custom backend
    dynamic: bool | None = None  # dynamic shapes: None lets Dynamo decide
    fullgraph: bool = False  # error on graph breaks
    options: dict[str, Any] | None = None  # Inductor options (mode=default only)
    cache_dir: str | None = None  # persistent Inductor/AOTAutograd caches (None: torch's default)
    target: str = "model"  # model: whole model | blocks: each repeated block, in place
    optimizer: bool = False  # compile the optimizer step too (learning rates become tensors)
    explain: bool = False  # print Dynamo's explanation (graphs, breaks, reasons) of one batch first
    fail_on_recompile_limit: bool = False  # hitting Dynamo's recompile limit is an error
    auto: bool = False  # measure eager vs compiled on a few steps, keep the faster
    auto_steps: int = 5  # compile.auto: timed steps each way (after one warm-up step)
    trace: bool = False  # write torch's compile trace (+ tlparse report) into the run dir
    warm_only: bool = False  # compile one training step and evaluation batch into the cache, stop

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
    max_steps: int | None = None  # optional cap on optimizer steps (None: no cap)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed
    seed: int = 0  # seeds model init and data order (the split has data.split_seed)
    grad_clip: float | None = None  # max gradient norm (None: no clipping)
    resume: str | None = None  # None | auto (this run dir's checkpoints/last.pt) | checkpoint path
    monitor: str = "val/acc"  # metric that selects best.pt and is returned to Hydra sweepers
    monitor_mode: str = "max"  # max | min
    log_every_n_steps: int = 10  # steps between progress refreshes
    strategy: str = "single"  # single | ddp (one process per device, torchrun)
    num_threads: Any = "auto"  # torch threads: auto (the CPUs this process may use) | n
    tf32: bool = True  # CUDA: TF32 matmuls and convolutions (Ampere or newer); false: full fp32
    cudnn_benchmark: bool = True  # CUDA: cuDNN times its convolution algorithms, keeps the fastest
    channels_last: Any = "auto"  # auto (conv models on CUDA) | true | false: NHWC model and inputs
    label_smoothing: float = 0.0  # training loss only, in [0, 1); validation loss never smooths
    ema: float | None = None  # decay of an exponential moving average of the weights (0.999)

    def __post_init__(self) -> None:
        auto_or_count("trainer.num_threads", self.num_threads, minimum=1, example="set "
                      "trainer.num_threads=auto (this process's CPUs, or its agent's share)")  # fmt: skip
        _check(self.channels_last in ("auto", True, False), f"trainer.channels_last="
               f"{self.channels_last!r} must be auto, true or false.")  # fmt: skip
        _check(0.0 <= self.label_smoothing < 1.0, f"trainer.label_smoothing="
               f"{self.label_smoothing} must lie in [0, 1), e.g. 0.1.")  # fmt: skip
        _check(self.ema is None or 0.0 < self.ema < 1.0, f"trainer.ema={self.ema} must lie "
               "strictly between 0 and 1 (e.g. 0.999), or be null for no EMA.")  # fmt: skip
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

        _one_of("trainer.monitor", self.monitor, EPOCH_METRICS)


@dataclass
class LoggerConfig:
    enabled: bool = True  # false: no W&B run at all (logger=none)
    mode: str = "offline"  # offline | online | disabled; WANDB_MODE wins when set
    project: str = "compiled-trainer"  # W&B project
    entity: str | None = None  # W&B user or team (None: your default entity)
    group: str | None = None  # groups runs in the W&B UI (sweep trials: the sweep id)
    tags: list[str] = field(default_factory=list)  # W&B run tags
    name: str | None = None  # run name (None: W&B picks one)

    def __post_init__(self) -> None:
        _one_of("logger.mode", self.mode, LOGGER_MODES)


# The config groups whose defaults the schemas above own.
GROUP_SCHEMAS: dict[str, type] = {
    "paths": PathsConfig,
    "data": DataConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "scheduler": SchedulerConfig,
    "compile": CompileConfig,
    "trainer": TrainerConfig,
    "logger": LoggerConfig,
}


def register_schemas() -> None:
    """Store each group's dataclass defaults in Hydra's ConfigStore as `<group>_schema`, a
    config outside every group (so no group offers it as an option): the one source of
    defaults. Every conf/<group>/*.yaml lists `/<group>_schema@_here_` first and says only what
    differs. The nodes are plain (untyped), so a typo reaches `validate`, whose error names
    the key and the fix, instead of failing inside Hydra's composition. Hydra's plugin scan
    calls this (hydra_plugins/compiled_trainer), before any composition."""
    store = ConfigStore.instance()
    for group, schema in {**GROUP_SCHEMAS, "eval": EvalConfig}.items():
        node = OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)
        store.store(name=f"{group}_schema", node=OmegaConf.create(node))


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


@dataclass
class EvalConfig:
    """The `eval` section of `python -m trainer.evaluate` (conf/evaluate.yaml: `eval: schema`)."""

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
