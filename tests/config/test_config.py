"""Every option of every config group composes and validates; bad values fail with the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import CONF, make_cfg
from trainer.config.schema import ConfigError
from trainer.preflight import validate

GROUP_OPTIONS = [
    (group.name, option.stem)
    for group in sorted(CONF.iterdir())
    if group.is_dir() and group.name not in ("sweep", "hydra")
    for option in sorted(group.glob("*.yaml"))
]


def test_every_group_has_options():
    groups = {g for g, _ in GROUP_OPTIONS}
    assert {
        "data",
        "model",
        "optimizer",
        "scheduler",
        "compile",
        "trainer",
        "logger",
        "paths",
    } <= groups


@pytest.mark.parametrize("group, option", GROUP_OPTIONS)
def test_every_option_composes_and_validates(group, option):
    extra = ["data.root=/somewhere"] if (group, option) == ("data", "imagefolder") else []
    conf = validate(make_cfg(f"{group}={option}", *extra))
    node = getattr(conf, group)
    if group in ("data", "model", "optimizer", "scheduler"):
        assert node.name == option


def test_defaults():
    conf = validate(make_cfg())
    assert conf.data.name == "digits"
    assert conf.model.name == "small_cnn"
    assert conf.optimizer.name == "sgd"
    assert conf.compile.disable is False and conf.compile.mode == "default"
    assert conf.compile.backend == "inductor"
    assert conf.logger.enabled and conf.logger.mode == "offline"
    assert conf.trainer.monitor == "val/acc" and conf.trainer.precision == "32"


def test_compile_off_preset_disables():
    assert validate(make_cfg("compile=off")).compile.disable is True


@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.max_epochs=0", "trainer.max_epochs"),
        ("trainer.max_epochs=-3", "trainer.max_epochs"),
        ("data.batch_size=0", "data.batch_size"),
        ("optimizer.lr=0", "optimizer.lr"),
        ("optimizer.lr=-0.1", "optimizer.lr"),
        ("trainer.precision=fp8", "trainer.precision"),
        ("trainer.device=tpu", "trainer.device"),
        ("trainer.monitor=val/f1", "trainer.monitor"),
        ("logger.mode=sometimes", "logger.mode"),
        ("+trainer.max_epoch=3", "trainer.max_epoch"),
        ("data.batch_size=many", "data.batch_size"),
        ("compile.mode=max-autotune", "compile.options"),
    ],
)
def test_bad_values_name_the_key(override, key):
    extra = ["compile.options={epilogue_fusion: true}"] if key == "compile.options" else []
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(override, *extra))
    message = str(err.value)
    assert key in message
    assert "\n" not in message


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match="Did you mean trainer.max_epochs"):
        validate(make_cfg("+trainer.max_epoch=3"))


def test_imagefolder_requires_root():
    with pytest.raises(ConfigError, match="data.root"):
        validate(make_cfg("data=imagefolder"))


def _schema_defaults(group: str) -> dict:
    from omegaconf import OmegaConf

    from trainer.config.schema import GROUP_SCHEMAS

    return OmegaConf.to_container(OmegaConf.structured(GROUP_SCHEMAS[group]), resolve=False)


def test_group_yamls_say_only_what_differs_from_the_schema():
    from trainer.config.schema import GROUP_SCHEMAS

    conf = Path(__file__).resolve().parents[2] / "conf"
    repeated = []
    for group in GROUP_SCHEMAS:
        defaults = _schema_defaults(group)
        for path in sorted((conf / group).glob("*.yaml")):
            own = yaml.safe_load(path.read_text()) or {}
            own.pop("defaults", None)
            repeated += [
                f"{group}/{path.name}: {k}"
                for k, v in own.items()
                if k != "name" and defaults.get(k) == v  # each option names itself
            ]
    assert repeated == []


def test_a_group_option_composes_over_the_schema_defaults():
    cfg = make_cfg("data=cifar10", "model=resnet18")
    assert cfg.data.name == "cifar10" and cfg.data.num_workers == "auto"
    assert cfg.data.batch_size == _schema_defaults("data")["batch_size"]  # from the schema
    assert cfg.model.image_size == 32 and cfg.model.width == _schema_defaults("model")["width"]
    assert set(cfg.trainer) == set(_schema_defaults("trainer"))


def test_every_schema_field_has_one_comment():
    import inspect

    from trainer.config.schema import GROUP_SCHEMAS

    bare = []
    for schema in GROUP_SCHEMAS.values():
        lines = inspect.getsource(schema).splitlines()
        for name in schema.__dataclass_fields__:
            line = next(line for line in lines if line.strip().startswith(f"{name}:"))
            if "#" not in line:
                bare.append(f"{schema.__name__}.{name}")
    assert bare == []


@pytest.mark.slow
def test_cfg_job_prints_the_whole_composed_config(tmp_path):
    from tests.conftest import run_cli

    proc = run_cli("--cfg", "job", "data=fake", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    assert printed["data"]["name"] == "fake" and printed["compile"]["mode"] == "default"
    assert printed["paths"]["cache_dir"].startswith("${oc.env:TRAINER_CACHE_DIR")


def test_default_output_root_follows_the_environment(monkeypatch):
    from trainer.outputs.layout import default_output_root

    monkeypatch.setenv("TRAINER_OUTPUT_DIR", "/somewhere/else")
    assert str(default_output_root()) == "/somewhere/else"
