"""Every check of a run configuration that needs no data: the schemas (`trainer.config.schema`),
then this machine and torch (compile mode, backend, options and hardware, model name, device,
precision). `python -m trainer` and the sweeper, before it launches trials, run the same."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trainer import compiling
from trainer.config.paths import expand_path
from trainer.config.rules import unknown_key_message
from trainer.config.schema import ConfigError, TrainConfig
from trainer.hardware import devices
from trainer.train import models

log = logging.getLogger(__name__)


def validate(cfg: DictConfig) -> TrainConfig:
    """Check the composed config against the schemas and this machine (compile mode, backend
    and options, model name, device, precision): every check that needs no data. The typed
    config of `cfg`, once every check passed; else the first `ConfigError`."""
    conf = check_schema(cfg)
    check_environment(conf)
    return conf


def check_environment(conf: TrainConfig) -> None:
    """What the schema cannot know: does this torch know the compile mode, backend and Inductor
    options, can it build the model, and does this machine have the device and precision."""
    models.check_name(conf.model.name)
    t = conf.trainer
    if t.strategy == "ddp":
        device = devices.rank_device(t.device, 0)
    else:
        device = devices.resolve_device(t.device)
    devices.resolve_precision(t.precision, device)
    if t.precision == "16-mixed" and device.type == "cpu":
        log.warning(
            "trainer.precision=16-mixed on the CPU: float16 autocast there is emulated and runs "
            "many times slower than fp32 (about 60x on a small ResNet). Use trainer.precision=32, "
            "or trainer.precision=bf16-mixed on a CPU with bfloat16 support."
        )
    if conf.compile.warm_only and (conf.compile.disable or t.strategy == "ddp"):
        raise ConfigError(
            "compile.warm_only=true compiles a single-process run's graphs into the cache; "
            "drop compile=off (or compile.disable=true) and trainer.strategy=ddp, or drop "
            "compile.warm_only."
        )
    if not conf.compile.disable:
        compiling.check_config(conf.compile)
        compiling.check_hardware(conf.compile, device, warn=False)


# Keys of the composed config that belong to Hydra plumbing, not to the run.
_NOT_RUN_KEYS = ("hydra", "sweep")
# The schema as a config, built once per process (about 10 ms): a sweep trial forked from its
# template finds it built; OmegaConf.merge copies it, so it stays as built.
_SCHEMA = OmegaConf.structured(TrainConfig)


def check_schema(cfg: DictConfig) -> TrainConfig:
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
        merged = OmegaConf.merge(_SCHEMA, plain)
        result = OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(_omegaconf_message(key, err)) from None
    assert isinstance(result, TrainConfig)
    return expand_paths(result)


def expand_paths(conf: TrainConfig) -> TrainConfig:
    """`~` and `$VAR` expanded in every path key of `conf` (trainer.resume=auto stays)."""
    p = conf.paths
    p.output_dir, p.data_dir, p.cache_dir = (
        expand_path(p.output_dir),
        expand_path(p.data_dir),
        expand_path(p.cache_dir),
    )
    conf.data.root, conf.compile.cache_dir = (
        expand_path(conf.data.root),
        expand_path(conf.compile.cache_dir),
    )
    if conf.trainer.resume != "auto":
        conf.trainer.resume = expand_path(conf.trainer.resume)
    return conf


def _omegaconf_message(key: str, err: OmegaConfBaseException) -> str:
    text = str(err).splitlines()[0]
    if "MissingMandatoryValue" in type(err).__name__:
        return f"{key} is required but not set; add {key}=<value> to the command line."
    if "not in struct" in text or "Key '" in text and "not in" in text:
        return unknown_key_message(key, _fields_of(key.rpartition(".")[0])) + "."
    return f"{key}: {text}. Fix the value given for {key} (on the command line or in conf/)."


def _fields_of(group: str) -> list[str]:
    node: Any = OmegaConf.structured(TrainConfig)
    for part in filter(None, group.split(".")):
        node = node.get(part)
        if not isinstance(node, DictConfig):
            return []
    return [str(k) for k in node]
