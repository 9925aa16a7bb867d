"""A trial's argv: every value survives W&B's agent's expansion and Hydra's parser exactly
(floats, ints, bools, strings with spaces, commas, `=` or quotes, lists, null), repaired from the
parameter file the agent writes."""

from __future__ import annotations

import os

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

from trainer.sweep.definition.command import trial_command
from trainer.trial.trial_argv import hydra_value, repair_argv, repair_sys_argv

VALUES = {
    "f.small": 1e-05,
    "f.plain": 0.1,
    "i": 3,
    "b.true": True,
    "b.false": False,
    "n": None,
    "s.space": "a b",
    "s.comma": "a,b",
    "s.eq": "x=y",
    "s.quote": 'it\'s "so"',
    "s.null": "null",
    "s.num": "1e-5",
    "s.bool": "true",
    "s.backslash": "a\\b\\",
    "l": [1, "a,b", None, 2.5],
    "l.nested": [[1, 2], ["x"]],
}


def _agent_argv(command: list[str], params: dict) -> list[str]:
    """What W&B's agent runs for `command` with `params` (its own macro expansion)."""
    args = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    expanded = []
    for chunk in create_sweep_command(list(command)):
        if chunk == "${args_no_hyphens}":
            expanded += args["args_no_hyphens"]
        else:
            expanded.append(chunk)
    return expanded


@pytest.mark.parametrize("key", list(VALUES))
def test_every_value_survives_agent_argv_hydra(key):
    value = VALUES[key]
    argv = _agent_argv(trial_command([]), {key: value})
    assert argv[:3] == ["/usr/bin/env", "python", "-m"] or argv[2] == "-m"
    repaired = repair_argv(argv[4:], {key: value})
    parsed = OverridesParser.create().parse_overrides(repaired)
    got = {o.key_or_group: o.value() for o in parsed if not o.is_sweep_override()}
    assert all(not o.is_sweep_override() for o in parsed)
    assert got[key] == value
    assert type(got[key]) is type(value)


def test_repair_reads_the_agents_param_yaml(tmp_path, monkeypatch):
    import yaml

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"s": {"value": "a,b"}, "n": {"value": None}}))
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(path))
    argv = ["prog", "s=a,b", "n=None", "other=1"]
    assert repair_sys_argv(argv) == ["prog", "s='a,b'", "n=null", "other=1"]
    monkeypatch.delenv("WANDB_SWEEP_PARAM_PATH")
    assert repair_sys_argv(argv) == argv
    assert os.environ.get("WANDB_SWEEP_PARAM_PATH") is None


def test_hydra_value_is_plain_for_plain_values():
    assert [hydra_value(v) for v in (1e-05, 3, True, None, [1, 2])] == [
        "1e-05",
        "3",
        "true",
        "null",
        "[1,2]",
    ]


def test_repaired_values_reach_the_composed_config():
    from omegaconf import OmegaConf

    from tests.conftest import make_cfg

    params = {f"extra.{k.replace('.', '_')}": v for k, v in VALUES.items()}
    argv = _agent_argv(trial_command([]), params)[4:-1]
    cfg = make_cfg(*("+" + arg for arg in repair_argv(argv, params)))
    got = OmegaConf.to_container(cfg.extra)
    assert {f"extra.{k}": v for k, v in got.items()} == params
