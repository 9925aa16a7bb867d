"""Composition paid once per agent: each trial still composes its config with Hydra, in its own
process, but the two costly steps of a composition (the defaults tree, and loading and merging
its config files: about 0.1 s of a trial's start-up on two cores) come from what its template
composed for an earlier trial with the same config-group choices. What depends on the trial's
own command line (its values, `hydra.overrides`, `hydra.runtime`, `hydra.job`) Hydra still
applies itself, so a trial gets exactly the config a full composition gives (tested).

The template `install`s wrappers of the two steps, of Hydra's config-file reads, of its
per-composition copy of the config repository and of its parse of one override (the same text
parses to the same override: a trial parses only the arguments its template has not seen, its
own values), and `warm`s after forking each trial whose group choices it has not composed yet;
a forked trial inherits what it kept. A kept composition is used only while every config file
it read is unchanged on disk (size and mtime), and only for the same config name, search path
and group choices; anything else composes in full."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import warnings
from typing import Any

from hydra._internal import config_loader_impl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
from hydra._internal.defaults_list import Overrides
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from trainer.config.overrides import COMMANDS, TRAIN, compose, parse_argv

MAX_KEPT = 16  # compositions kept per template (distinct group choices of a sweep)
# A `key=value` whose dotted key can only set a config value (a config group is named with "/"):
# two trials that differ only in such arguments have the same group choices.
_VALUE = re.compile(r"^[\w-]+(\.[\w-]+)+=")
# Hydra's flags that make the command something other than one run: nothing to compose.
_NOT_ONE_RUN = tuple(flag for flag in COMMANDS if flag != "run")


@dataclasses.dataclass
class _Kept:
    defaults_list: Any  # Hydra's DefaultsList of the composition
    files: dict[str, tuple[int, int]]  # the config files it read: (size, mtime_ns)
    cfg: Any = None  # the merged config before the command line's values
    pid: int = 0  # the process that kept `cfg`


MAX_PARSED = 4096  # overrides kept parsed per template
_parsed: dict[str, Override] = {}  # an override's text -> Hydra's parse of it (no loader set)
_kept: dict[tuple, _Kept] = {}
_warmed: set[tuple] = set()  # (cwd, arguments other than dotted values) composed already
_reading: dict[str, tuple[int, int]] | None = None  # while the template composes: files read
# Config files the template read: (search path folder, config path) -> (stamp, Hydra's result)
_files: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}


def _stamp(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def _unchanged(kept: _Kept) -> bool:
    try:
        return all(_stamp(path) == stamp for path, stamp in kept.files.items())
    except OSError:  # a file it read is gone
        return False


def _key(repo: Any, config_name: str | None, overrides_list: list, *flags: bool) -> Any:
    """(what the defaults list depends on, Hydra's split of the overrides), or None where
    Hydra's own split refuses them (the full composition says why)."""
    try:
        split = Overrides(repo=repo, overrides_list=overrides_list)
    except Exception:  # noqa: BLE001 (Hydra raises the same error when it composes in full)
        return None
    values = {id(o) for o in split.config_overrides}
    choices = tuple(o.input_line for o in overrides_list if id(o) not in values)
    sources = tuple((s.provider, s.path) for s in repo.get_sources())
    return (sources, config_name, choices, *flags), split


def _create_defaults_list(
    repo: Any,
    config_name: str | None,
    overrides_list: list,
    prepend_hydra: bool,
    skip_missing: bool,
) -> Any:
    found = _key(repo, config_name, overrides_list, prepend_hydra, skip_missing)
    kept = _kept.get(found[0]) if found is not None else None
    if kept is not None and _unchanged(kept):
        # the same tree; the values of this command line are its own
        return dataclasses.replace(kept.defaults_list, config_overrides=found[1].config_overrides)
    made = _inner_defaults(
        repo=repo,
        config_name=config_name,
        overrides_list=overrides_list,
        prepend_hydra=prepend_hydra,
        skip_missing=skip_missing,
    )
    if found is not None and _reading is not None and len(_kept) < MAX_KEPT:
        _kept[found[0]] = _Kept(made, dict(_reading))
    return made


def _compose_from_defaults(self: Any, defaults: list, repo: Any) -> Any:
    kept = next((k for k in _kept.values() if k.defaults_list.defaults is defaults), None)
    if kept is not None and kept.cfg is not None:
        return _handed_out(kept)
    cfg = _inner_compose(self, defaults=defaults, repo=repo)
    if kept is not None and _reading is not None:
        kept.cfg, kept.files, kept.pid = copy.deepcopy(cfg), dict(_reading), os.getpid()
    return cfg


def _handed_out(kept: _Kept) -> Any:
    """The kept config for one composition: a copy in the process that kept it; in a trial
    forked after, the kept config itself, once (the fork's memory is the trial's own: the
    template's stays as kept; about 10 ms of a deep copy saved). A second composition in that
    trial composes in full."""
    if os.getpid() == kept.pid:
        return copy.deepcopy(kept.cfg)
    cfg, kept.cfg = kept.cfg, None
    return cfg


def _load_config(self: Any, config_path: str) -> Any:
    """Hydra's read of one config: a file the template read is handed out again (a copy) while
    it is unchanged on disk (the primary config, which every composition reads first)."""
    source = self._find_object_source(config_path=config_path, object_type=ObjectType.CONFIG)
    if source is None or source.scheme() != "file":
        return _inner_load(self, config_path=config_path)
    path = os.path.realpath(os.path.join(source.path, source._normalize_file_name(config_path)))
    try:
        stamp = _stamp(path)  # before reading: a change while it reads is a change
    except OSError:  # missing: Hydra raises its own error
        return _inner_load(self, config_path=config_path)
    if _reading is not None:  # every file a kept composition read, kept already or not
        _reading[path] = stamp
    read = _files.get((source.path, config_path))
    if read is not None and read[0] == stamp:
        return copy.deepcopy(read[1])
    result = _inner_load(self, config_path=config_path)
    if _reading is not None:
        _files[(source.path, config_path)] = (stamp, copy.deepcopy(result))
    return result


def _caching_repository(self: Any, delegate: Any) -> None:
    """Hydra's per-composition repository copies its delegate so that `initialize_sources`
    leaves the delegate's sources as they were. That method sets a new list, so a shallow copy
    does the same without a deep copy of Hydra's ConfigStore, which the structured-config
    source holds (about 6 ms of every trial) and reads only through `load`, which copies what
    it returns."""
    if type(delegate) is not ConfigRepository:
        return _inner_caching(self, delegate)
    self.delegate = copy.copy(delegate)
    self.cache = {}
    return None


def _parse_rule(self: Any, s: str, rule_name: str) -> Any:
    """Hydra's parse of one command-line override, kept by its text: every trial of a sweep
    repeats most of its arguments (`model=`, `data=`, `hydra.mode=RUN`), and both the trial's
    checks and Hydra's composition parse each (0.1 to 0.5 ms apiece here). The grammar's
    functions (`choice`, `range`, `interval`, casts, `sort`, ...) are pure, so the same text
    gives the same override; each caller gets its own copy (Hydra sets its loader on it).
    Errors are not kept: they are raised again."""
    if rule_name != "override":
        return _inner_parse_rule(self, s, rule_name)
    found = _parsed.get(s)
    if found is not None:
        return copy.deepcopy(found)
    parsed = _inner_parse_rule(self, s, rule_name)
    if isinstance(parsed, Override) and parsed.config_loader is None and len(_parsed) < MAX_PARSED:
        _parsed[s] = copy.deepcopy(parsed)
    return parsed


_inner_defaults = config_loader_impl.create_defaults_list
_inner_compose = ConfigLoaderImpl._compose_config_from_defaults_list
_inner_load = ConfigRepository.load_config
_inner_caching = CachingConfigRepository.__init__
_inner_parse_rule = OverridesParser.parse_rule


def install() -> None:
    """Route Hydra's two costly steps (and its config-file reads) through the kept compositions;
    in the template, before it forks a trial."""
    config_loader_impl.create_defaults_list = _create_defaults_list  # type: ignore[assignment]
    ConfigLoaderImpl._compose_config_from_defaults_list = _compose_from_defaults  # type: ignore[method-assign]
    ConfigRepository.load_config = _load_config  # type: ignore[method-assign]
    CachingConfigRepository.__init__ = _caching_repository  # type: ignore[method-assign]
    OverridesParser.parse_rule = _parse_rule  # type: ignore[method-assign]


def warm(args: list[str], cwd: str) -> Any:
    """Compose `python -m trainer *args` (run from `cwd`) as its trial will, keep its defaults
    list and merged config for the trials forked after it, and return the config; None when a
    trial with the same group choices was composed already. Prints nothing; a command line that
    does not compose is left to the trial, which reports why (None)."""
    global _reading
    seen = (cwd, *(a for a in args if not _VALUE.match(a)))
    if seen in _warmed or len(_warmed) >= MAX_KEPT:
        return None
    _warmed.add(seen)
    parsed = parse_argv(["trainer", *args])
    if parsed is None or any(getattr(parsed[0], flag, None) for flag in _NOT_ONE_RUN):
        return None
    here, _reading = os.getcwd(), {}
    try:
        os.chdir(cwd)  # relative --config-dir and search paths, as the trial resolves them
        with warnings.catch_warnings():  # not the template's to print (see docs/agents.md)
            warnings.simplefilter("ignore")
            return compose(TRAIN, parsed[0], parsed[0].overrides)
    except Exception:  # noqa: BLE001 (the trial composes it in full and says why)
        return None
    finally:
        _reading = None
        os.chdir(here)
