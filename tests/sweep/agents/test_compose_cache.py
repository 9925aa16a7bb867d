"""A trial composed from what its template kept gets exactly the config a full composition gives:
its own values, `+` keys, run directory and `hydra.overrides`; another group choice, a config
file changed on disk or a command line that does not compose is composed in full."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hydra._internal import config_loader_impl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf

from trainer.config.overrides import TRAIN, compose, parse_argv
from trainer.config.schema import DataConfig
from trainer.data import stored
from trainer.sweep.agents import compose_cache

FIXED = ["data=digits", "logger=none", "compile=off", "hydra.mode=RUN"]


@pytest.fixture
def cache():
    """compose_cache installed as a template installs it; Hydra's own steps back afterwards."""
    saved = (
        config_loader_impl.create_defaults_list,
        ConfigLoaderImpl._compose_config_from_defaults_list,
        ConfigRepository.load_config,
        CachingConfigRepository.__init__,
        OverridesParser.parse_rule,
    )
    compose_cache.install()
    try:
        yield compose_cache
    finally:
        (
            config_loader_impl.create_defaults_list,
            ConfigLoaderImpl._compose_config_from_defaults_list,
            ConfigRepository.load_config,
            CachingConfigRepository.__init__,
            OverridesParser.parse_rule,
        ) = saved
        compose_cache._parsed.clear()
        compose_cache._kept.clear()
        compose_cache._warmed.clear()
        compose_cache._files.clear()


def _compose(args: list[str]):
    parsed = parse_argv(["trainer", *args])
    cfg = compose(TRAIN, parsed[0], parsed[0].overrides)
    cfg.hydra.runtime.cwd = "<cwd>"
    return OmegaConf.to_yaml(cfg)


def _full(args: list[str]) -> str:
    """The composition without anything kept."""
    kept, compose_cache._kept = compose_cache._kept, {}
    try:
        return _compose(args)
    finally:
        compose_cache._kept = kept


def _hits(monkeypatch) -> list[bool]:
    """Whether each later composition took its defaults list from what was kept."""
    hits, inner = [], compose_cache._inner_defaults

    def counted(**kwargs):
        hits.append(False)
        return inner(**kwargs)

    monkeypatch.setattr(compose_cache, "_inner_defaults", counted)
    return hits


def test_a_trial_with_other_values_gets_the_full_compositions_config(cache, tmp_path, monkeypatch):
    cache.warm(["model=small_cnn", *FIXED, "optimizer.lr=0.1", f"hydra.run.dir={tmp_path}/0"], ".")
    assert len(cache._kept) == 1 and next(iter(cache._kept.values())).cfg is not None
    trial = [
        "model=small_cnn", *FIXED, "optimizer.lr=0.02", "trainer.seed=4", "+extra.note=x",
        f"hydra.run.dir={tmp_path}/1",
    ]  # fmt: skip
    want = _full(trial)
    misses = _hits(monkeypatch)
    assert _compose(trial) == want
    assert misses == []  # its defaults list and merged config were the kept ones
    assert "lr: 0.02" in want and "note: x" in want and f"{tmp_path}/1" in want


def test_another_group_choice_is_composed_in_full(cache, monkeypatch):
    cache.warm(["model=small_cnn", *FIXED], ".")
    trial = ["model=resnet18", *FIXED, "optimizer.lr=0.02"]
    want = _full(trial)
    misses = _hits(monkeypatch)
    assert _compose(trial) == want
    assert misses == [False]


def test_a_config_file_changed_on_disk_is_read_again(cache, tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    option = tmp_path / "model" / "mine.yaml"
    option.write_text("defaults:\n  - small_cnn\n  - _self_\nwidth: 8\n")
    args = ["--config-dir", str(tmp_path), "model=mine", *FIXED]
    cache.warm(args, ".")
    assert len(cache._kept) == 1
    option.write_text("defaults:\n  - small_cnn\n  - _self_\nwidth: 24\n")
    os.utime(option, ns=(0, 1))  # another mtime, whatever the file system's resolution
    misses = _hits(monkeypatch)
    assert "width: 24" in _compose(args)
    assert misses == [False]


def test_a_file_two_kept_compositions_share_is_checked_for_both(cache, tmp_path, monkeypatch):
    """The second composition reads the shared file from what the first kept: it still counts
    among the files its own composition depends on."""
    (tmp_path / "data").mkdir()
    shared = tmp_path / "data" / "mine.yaml"
    shared.write_text("defaults:\n  - digits\n  - _self_\nbatch_size: 16\n")
    common = ["--config-dir", str(tmp_path), "data=mine", "logger=none", "hydra.mode=RUN"]
    cache.warm(["model=small_cnn", *common], ".")
    cache.warm(["model=resnet18", *common], ".")
    assert len(cache._kept) == 2
    shared.write_text("defaults:\n  - digits\n  - _self_\nbatch_size: 48\n")
    os.utime(shared, ns=(0, 1))
    misses = _hits(monkeypatch)
    assert "batch_size: 48" in _compose(["model=resnet18", *common])
    assert misses == [False]


def test_a_set_to_download_is_not_kept():
    """The template would fetch it while the trial it just forked does."""
    assert stored._kept_key(DataConfig(name="mnist", download=True), None, True) is None
    assert stored._kept_key(DataConfig(name="mnist"), None, True) is not None


def test_a_template_composes_each_set_of_group_choices_once(cache, monkeypatch):
    cache.warm(["model=small_cnn", *FIXED, "optimizer.lr=0.1"], ".")
    composed = []
    monkeypatch.setattr(cache, "compose", lambda *a: composed.append(a))
    cache.warm(["model=small_cnn", *FIXED, "optimizer.lr=0.3", "hydra.run.dir=/elsewhere"], ".")
    assert composed == []  # only dotted values changed: the same group choices


def test_a_command_line_that_does_not_compose_keeps_nothing(cache, capsys):
    cache.warm(["model=no_such_model", *FIXED], ".")
    cache.warm(["model=small_cnn", *FIXED, "-m"], ".")  # a sweep, not one run
    assert cache._kept == {}
    assert capsys.readouterr() == ("", "")  # the trial reports it


def test_warm_resolves_a_relative_config_dir_from_the_trials_folder(cache, tmp_path):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mine.yaml").write_text("defaults:\n  - small_cnn\n")
    here = Path.cwd()
    cache.warm(["--config-dir", "conf", "model=mine", *FIXED], str(tmp_path))
    assert Path.cwd() == here and len(cache._kept) == 1


def test_a_forked_trial_takes_the_kept_config_itself_once(cache, tmp_path):
    """In a trial forked after its template kept a composition, the kept config is handed out
    uncopied once (the trial's memory is its own); a second composition there, and the
    template's next one, still give what a full composition gives."""
    cache.warm(["model=small_cnn", *FIXED, "optimizer.lr=0.1", f"hydra.run.dir={tmp_path}/0"], ".")
    first = ["model=small_cnn", *FIXED, "optimizer.lr=0.02", f"hydra.run.dir={tmp_path}/1"]
    second = ["model=small_cnn", *FIXED, "+extra.note=y", f"hydra.run.dir={tmp_path}/2"]
    want = [_full(first), _full(second)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial
        try:
            got = [_compose(first), _compose(second)]
            handed = next(iter(cache._kept.values())).cfg is None
            os.write(write, json.dumps([got == want, handed]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        result = json.loads(pipe.read() or "null")
    os.waitpid(pid, 0)
    assert result == [True, True]
    assert next(iter(cache._kept.values())).cfg is not None
    assert _compose(first) == want[0]  # the template's kept config is as it was


PARSED = [
    "model=small_cnn",
    "optimizer.lr=0.01",
    "+trainer.extra=[1,2,{a:b}]",
    "++paths.x={k: v}",
    "~logger",
    "hydra/launcher=basic",
    "data@pkg=digits",
    "optimizer.lr=choice(0.1,0.2)",
    "trainer.seed=range(3)",
    "optimizer.lr=tag(log, interval(0.001, 0.5))",
    "x=sort(3,1,2)",
    "hydra.run.dir='a b/${now:%H}'",
]


def test_an_override_parsed_again_is_hydras_parse_and_its_own_copy(cache):
    """The template keeps each override's parse by its text: parsed again (in a trial), it is
    what Hydra's parser gives, a copy of its own (Hydra sets its loader on it), and a text
    that does not parse still raises each time."""
    hydras = compose_cache._inner_parse_rule
    expected = [hydras(OverridesParser.create(), text, "override") for text in PARSED]
    first = OverridesParser.create().parse_overrides(PARSED)
    again = OverridesParser.create().parse_overrides(PARSED)
    assert set(compose_cache._parsed) == set(PARSED)
    assert first == expected and again == expected
    for one, other in zip(first, again, strict=True):
        assert one is not other
    again[2]._value.append("changed")
    again[0].config_loader = object()
    assert OverridesParser.create().parse_overrides(PARSED) == expected
    for _ in range(2):
        with pytest.raises(OverrideParseException):
            OverridesParser.create().parse_overrides(["model=(unclosed"])
