"""Each `hydra.sweeper.*` setting (key, type, default) is declared once, in the sweeper's
`config.py`, and reaches every other place from there: the plugin's constructor, the frozen
`SweepOptions`, the W&B configuration, PBT's defaults and a member's settings, the store's
`max_retries`, and the docs' tables of keys. No module of the sweep side declares a default of
its own."""

from __future__ import annotations

import ast
import dataclasses
import re
import time
from pathlib import Path

import hydra
from hydra.utils import instantiate

from hydra_plugins.wandb_sweeper.config import PbtConf, RunnerConf, WandbSweeperConf
from hydra_plugins.wandb_sweeper.wandb_sweeper import WandbSweeper
from tests.conftest import make_cfg
from trainer.config.hydra_version import _release
from trainer.sweep.definition.translate import SWEEP_KEYS
from trainer.sweep.options import SweepOptions
from trainer.sweep.search import classic, pbt_policy
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import new_id
from trainer.trial.pbt_files import Settings

_HYDRA_1_4 = _release(hydra.__version__) >= (1, 4)

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
# The sweeper's blocks the translation reads besides W&B's top-level keys (SWEEP_KEYS).
SEARCH_BLOCKS = {"parameters", "params", "pbt"}


def _declared(conf: type) -> dict[str, tuple]:
    return {f.name: (f.type, f.default, f.default_factory) for f in dataclasses.fields(conf)}


def test_sweep_options_are_the_runner_keys_with_their_types_and_defaults():
    assert _declared(SweepOptions) == _declared(RunnerConf)
    assert SweepOptions.__dataclass_params__.frozen


def test_every_key_of_the_sweeper_reaches_the_options_or_the_wandb_configuration():
    keys = {f.name for f in dataclasses.fields(WandbSweeperConf)} - {"_target_"}
    runner = {f.name for f in dataclasses.fields(RunnerConf)}
    translated = set(SWEEP_KEYS) | SEARCH_BLOCKS
    assert keys == runner | translated and not runner & translated


def test_the_plugin_is_constructed_with_the_conf_hydra_composed():
    cfg = make_cfg("sweep=lr_random", "hydra.sweeper.agents=2", "hydra.sweeper.pbt.seed=7")
    # as Hydra instantiates it: the keys as kwargs (Hydra 1.4 names the class it trusts, as its
    # Plugins.instantiate_sweeper does; Hydra 1.3 has no such argument)
    trusted = {"_execution_whitelist_": cfg.hydra.sweeper._target_} if _HYDRA_1_4 else {}
    sweeper = instantiate(cfg.hydra.sweeper, **trusted)
    # (by name: Hydra's plugin scan loads the plugin's modules a second time)
    assert type(sweeper).__name__ == WandbSweeper.__name__
    assert type(sweeper.conf).__name__ == WandbSweeperConf.__name__
    assert (sweeper.conf.agents, sweeper.conf.pbt.seed) == (2, 7)
    assert sweeper.conf.max_retries == RunnerConf.max_retries


def test_pbt_defaults_are_pbt_conf_and_reach_every_member(tmp_path):
    defaults = dataclasses.asdict(PbtConf())
    assert pbt_policy.DEFAULTS == defaults == pbt_policy.settings_of({"pbt": {}})
    config = {"pbt": {}, "metric": {"name": "val/acc"}, "parameters": {}}
    member = pbt_policy.member_settings(config, tmp_path)  # a key Settings lacks: TypeError
    assert {k: getattr(member, k) for k in defaults} == defaults
    assert {f.name: f.type for f in dataclasses.fields(Settings) if f.name in defaults} == {
        f.name: f.type.__name__ for f in dataclasses.fields(PbtConf)
    }


def test_a_store_without_the_sweeps_max_retries_takes_the_sweepers_default(tmp_path):
    """Lost RunnerConf.max_retries times, the run is handed out again; once more, crashed."""
    store = SweepStore(tmp_path / "sweep.db")
    store.set("config", {"method": "grid", "parameters": {"a": {"values": [1, 2]}}})
    run = None
    for losses in range(1, RunnerConf.max_retries + 2):
        run = store.claim(
            lambda runs: classic.next_params(store.config, runs), new_id=new_id, agent_pid=1
        )
        store.update(run.id, host="node-b", heartbeat_at=time.time() - 300)
        assert store.mark_lost_runs() == [run.id] and store.run(run.id).losses == losses
    crashed = store.run(run.id)
    assert crashed.state == "crashed" and f"max_retries={RunnerConf.max_retries}" in (
        crashed.log_tail
    )


def _literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is not None


def _defaults(tree: ast.AST, keys: set[str]):
    """(line, key) of each default of a sweeper key written as a literal: a class field, a
    function parameter, a dict of several such keys, a module constant DEFAULT_<KEY>."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                named = isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") in keys
                if named and _literal(item.value):
                    yield item.lineno, item.target.id
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = [*zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True)]
            pairs += zip(a.kwonlyargs, a.kw_defaults, strict=True)
            yield from ((d.lineno, p.arg) for p, d in pairs if p.arg in keys and _literal(d))
        elif isinstance(node, ast.Dict):
            named = [
                k.value
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value in keys and _literal(v)
            ]
            if len(named) > 1:
                yield node.lineno, ", ".join(named)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                name = getattr(target, "id", "")
                if name.startswith("DEFAULT_") and name.removeprefix("DEFAULT_").lower() in keys:
                    yield node.lineno, name


def test_no_module_of_the_sweep_side_declares_a_sweeper_default_again():
    keys = {f.name for conf in (RunnerConf, PbtConf) for f in dataclasses.fields(conf)}
    port = SRC / "trainer" / "sweep" / "search" / "wandb_sweeps"  # upstream's own settings
    paths = [
        *(SRC / "trainer" / "sweep").rglob("*.py"),
        SRC / "trainer" / "agent.py",
        *(SRC / "hydra_plugins" / "wandb_sweeper").glob("*.py"),
    ]
    again = [
        f"{path.relative_to(SRC)}:{line} {key}"
        for path in paths
        if port not in path.parents and path.name != "config.py"
        for line, key in _defaults(ast.parse(path.read_text()), keys)
    ]
    assert again == []


def _yaml(value) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    return str(value)


def _table(doc: str, heading: str, prefix: str = "") -> dict[str, str]:
    """key -> default of the key table under `heading` in docs/`doc` (keys without `prefix`)."""
    text = (REPO / "docs" / doc).read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            for key in re.findall(r"`([^`=]+)`", cells[0]):
                rows[key.removeprefix(prefix)] = cells[1]
    return rows


def test_the_docs_list_every_key_with_its_default():
    for conf, doc, heading, prefix, left_out in (
        (WandbSweeperConf, "sweeps.md", "## `hydra.sweeper.*`", "", {"_target_", "pbt"}),
        (PbtConf, "pbt.md", "## Keys", "hydra.sweeper.pbt.", set()),
    ):
        rows = _table(doc, heading, prefix)
        for f in dataclasses.fields(conf):
            if f.name in left_out:
                continue
            assert f.name in rows, f"docs/{doc} lists no {prefix}{f.name}"
            if f.default is not dataclasses.MISSING:
                assert rows[f.name] == _yaml(f.default), f"docs/{doc}: {prefix}{f.name}"
