"""A command line's overrides checked before Hydra composes: a key that no schema has, or an
option that no config group offers, becomes the project's one paragraph (exit 2) naming the
closest real keys or options, instead of Hydra's error and its `+key=value` advice."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
from pathlib import Path
from typing import Any

from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path, get_args_parser
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from trainer.config.paths import conf_dir
from trainer.config.rules import ConfigError, one_of, unknown_key_message
from trainer.config.schema import GROUP_SCHEMAS, EvalConfig

_LAUNCHER = "hydra/launcher"
# Hydra's launcher plugins by the option they add, and the package that installs each.
_LAUNCHER_PACKAGES = {
    "joblib": "hydra-joblib-launcher",
    "submitit_local": "hydra-submitit-launcher",
    "submitit_slurm": "hydra-submitit-launcher",
    "ray": "hydra-ray-launcher",
    "ray_aws": "hydra-ray-launcher",
    "rq": "hydra-rq-launcher",
}
# Hydra's flags of how the command runs, of which it takes one: as typed -> as parsed.
_MODES = {
    "--run": "run",
    "-m/--multirun": "multirun",
    "--cfg": "cfg",
    "--info": "info",
    "--shell-completion": "shell_completion",
}
# Hydra's flags that choose what the command does (a mode, or a help), as parsed.
COMMANDS = (*_MODES.values(), "help", "hydra_help")
# Hydra's flags whose command line is still being typed (--help and --info compose it too).
_NO_COMPOSE = ("shell_completion",)


@dataclasses.dataclass(frozen=True)
class App:
    """What one entry point composes: its primary config, the schema of each top-level key, the
    config groups that hold options, and top-level keys without a schema."""

    config_name: str
    schemas: dict[str, type]
    groups: tuple[str, ...]
    plain_keys: tuple[str, ...] = ()


TRAIN = App("train", GROUP_SCHEMAS, (*GROUP_SCHEMAS, "sweep"), ("sweep",))
EVALUATE = App(
    "evaluate",
    {**{g: GROUP_SCHEMAS[g] for g in ("paths", "compile", "data")}, "eval": EvalConfig},
    ("paths", "compile", "data"),
    ("checkpoint",),
)


def parse_argv(argv: list[str]) -> Any:
    """(Hydra's flags, parsed overrides) of argv as Hydra's own parser reads them, or None where
    Hydra would refuse it (it then parses argv again and says why) or where it prints and exits
    (--version). The same argv is parsed once per process (the entry point asks twice); the
    result is shared, so callers only read it."""
    return _parse_argv(tuple(argv))


@functools.lru_cache(maxsize=8)
def _parse_argv(argv: tuple[str, ...]) -> Any:
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            args = get_args_parser().parse_intermixed_args(argv[1:])  # hydra.main's parser
        return args, OverridesParser.create().parse_overrides(args.overrides)
    except (SystemExit, HydraException):
        return None


def check_overrides(argv: list[str], app: App = TRAIN) -> None:
    """Raise `ConfigError` for each override of a schema key that does not exist, an option of a
    config group that none of the search path's folders holds, or a top-level key the
    composition does not know. Cheap when every override is fine (a file check per group
    choice); a suspect one is confirmed by composing as Hydra would, so the user's --config-dir
    and hydra.searchpath groups count. `+key=value`, `~key`, `hydra.*` and `hydra/*` are Hydra's."""
    parsed = parse_argv(argv)
    if parsed is None or any(getattr(parsed[0], flag, None) for flag in _NO_COMPOSE):
        return
    args, overrides = parsed
    modes = [flag for flag, name in _MODES.items() if getattr(args, name, None)]
    if len(modes) > 1:
        raise ConfigError(
            f"{' and '.join(modes)} cannot go together: each is a way of running the command; "
            "keep one (--cfg and --info print and run nothing, -m runs the sweep)"
        )
    problems, suspects, sweeper = [], [], []
    ours = _wandb_sweep(overrides)
    for o in overrides:
        key = o.key_or_group
        if o.package is not None or o.is_add() or o.is_force_add() or o.is_delete():
            continue
        if ours and o.is_sweep_override():  # the sweeper's parameters: it reports their
            continue  # problems with every other problem of the sweep at once
        if ours and key.startswith(_SWEEPER):
            sweeper.append(o)
            continue
        if key == _LAUNCHER:
            suspects += [(o, v) for v in _choices(o) if v not in _launchers()]
            continue
        if key == "hydra" or key.startswith(("hydra.", "hydra/")) or "/" in key:
            continue
        if key in app.groups:
            suspects += [(o, v) for v in _choices(o) if not _option_file(key, v).is_file()]
            continue
        head = key.split(".")[0]
        if head in app.schemas:
            fields = _unknown_fields(app.schemas[head], key)
            if fields is not None:
                problems.append(unknown_key_message(key, fields))
        elif head not in app.plain_keys:
            suspects.append((o, None))
    problems += _sweeper_problems(sweeper)
    if problems:
        raise ConfigError(_paragraph(problems))
    if suspects:
        _confirm(app, args, overrides, suspects)


def _sweeper_problems(overrides: list[Any]) -> list[str]:
    """`hydra.sweeper.*` overrides that the sweeper's typed config refuses: a key it lacks, or a
    value of the wrong type (a word for an integer), in the project's words before Hydra's. The
    config is the one Hydra's plugin scan registered as hydra/sweeper=wandb."""
    if not overrides:
        return []

    Plugins.instance()  # imports every hydra_plugins module: their configs are stored
    node = ConfigStore.instance().load("hydra/sweeper/wandb.yaml").node
    problems = []
    for o in overrides:
        key = o.key_or_group.removeprefix(_SWEEPER)
        try:
            OmegaConf.update(OmegaConf.create(node), key, o.value(), merge=True)
        except (ConfigAttributeError, ConfigKeyError):
            problems.append(unknown_key_message(o.key_or_group, _beside(node, key)))
        except OmegaConfBaseException as err:
            reason = str(err).splitlines()[0]
            wanted = next((w for name, w in _WANTED if name in reason), "a value of its type")
            problems.append(f"{o.input_line} is refused ({reason}): give {wanted}")
    return problems


def _beside(node: Any, key: str) -> list[str]:
    """The keys of the deepest block of `node` that dotted `key` reaches (its siblings)."""
    for part in key.split(".")[:-1]:
        if part not in node or not OmegaConf.is_dict(node[part]):
            break
        node = node[part]
    return [k for k in node if not str(k).startswith("_")]


_SWEEPER = "hydra.sweeper."
# OmegaConf's names of the types it converts to, as the project says them.
_WANTED = (
    ("Integer", "an integer, or null where the key may be unset"),
    ("Float", "a number"),
    ("bool", "true or false"),
)


def _wandb_sweep(overrides: list[Any]) -> bool:
    """Whether the command line runs this project's sweeper (`sweep=...`, hydra/sweeper=wandb),
    which checks the swept keys itself."""
    for o in overrides:
        if o.key_or_group == "sweep" or (
            o.key_or_group == "hydra/sweeper" and str(o.value()) == "wandb"
        ):
            return True
    return False


def _paragraph(problems: list[str]) -> str:
    return " ".join(p.rstrip(".") + "." for p in problems)


def _choices(override: Any) -> list[str]:
    """The option names a group override chooses: one, or a sweep's list; none for null or
    a value that is not a name."""
    if override.is_sweep_override():
        try:
            return [str(v) for v in override.sweep_string_iterator()]
        except Exception:  # noqa: BLE001 (an interval or a glob: Hydra judges it)
            return []
    value = override.value()
    return [value] if isinstance(value, str) else []


def _launchers() -> set[str]:
    """The hydra/launcher options Hydra's plugins registered (the scan Hydra runs anyway)."""
    Plugins.instance()  # imports every hydra_plugins module: their configs are stored
    return {name.removesuffix(".yaml") for name in ConfigStore.instance().list(_LAUNCHER)}


def _option_file(group: str, option: str) -> Path:
    return Path(conf_dir()) / group / f"{option}.yaml"


def _unknown_fields(schema: type, key: str) -> list[str] | None:
    """The fields beside the first part of dotted `key` that `schema` lacks, or None where the
    schema has the key or cannot tell (below a dict or free-form field)."""
    node = schema
    for part in key.split(".")[1:]:
        fields = {f.name: f for f in dataclasses.fields(node)}
        if part not in fields:
            return list(fields)
        factory = fields[part].default_factory
        if not (isinstance(factory, type) and dataclasses.is_dataclass(factory)):
            return None
        node = factory
    return None


def _confirm(app: App, args: Any, overrides: list[Any], suspects: list[tuple[Any, Any]]) -> None:
    """Compose as Hydra would with each suspect in place; translate Hydra's refusal of a group
    option or of a key into our paragraph, and leave any other error to Hydra."""
    for suspect, option in suspects:
        key = suspect.key_or_group
        err = _compose_error(app, args, overrides, suspect, option)
        missing = isinstance(err, MissingConfigException) and option is not None
        if missing and key == _LAUNCHER and option in _LAUNCHER_PACKAGES:
            raise ConfigError(
                f"{key}={option} needs Hydra's {option} launcher plugin, which is not installed "
                f"here; pip install {_LAUNCHER_PACKAGES[option]} (or choose another launcher: "
                f"{', '.join(sorted(err.options or ()))})."
            )
        if missing and err.options:
            where = "Hydra's launcher plugins here, and" if key == _LAUNCHER else f"conf/{key}/,"
            one_of(
                key,
                option,
                tuple(sorted(err.options)),
                where=f" ({where} {key}/ of --config-dir and hydra.searchpath)",
            )
        if isinstance(err, ConfigCompositionException) and str(err).startswith(
            "Could not override"
        ):
            known = sorted({*app.schemas, *app.groups, *app.plain_keys} - {"sweep"})
            raise ConfigError(_paragraph([unknown_key_message(key, known)]))


def _compose_error(
    app: App, args: Any, overrides: list[Any], suspect: Any, option: str | None
) -> Exception | None:
    """What composing the command line raises with `suspect` choosing `option` (a sweep
    override becomes its first value), or None."""
    plain = []
    for o in overrides:
        if o is suspect and option is not None:
            plain.append(f"{o.key_or_group}={option}")
        elif o.is_sweep_override():
            first = _choices(o)[:1]
            plain += [f"{o.get_key_element()}={first[0]}"] if first else []
        else:
            plain.append(o.input_line)
    try:
        compose(app, args, plain, multirun=True)
    except Exception as err:  # noqa: BLE001 (what Hydra would report)
        return err
    return None


def compose(app: App, args: Any, overrides: list[str], *, multirun: bool = False) -> Any:
    """The config Hydra composes for `overrides` (Hydra's flags `args`: --config-dir,
    --config-name), on the search path Hydra's own `main` builds; Hydra's error otherwise."""
    search_path = create_config_search_path(conf_dir())
    if args.config_dir is not None:
        search_path.prepend(
            provider="command-line",
            path=f"file://{os.path.abspath(args.config_dir)}",
            anchor=SearchPathQuery(provider="schema"),
        )
    try:
        hydra = Hydra.create_main_hydra2(task_name=app.config_name, config_search_path=search_path)
        mode = RunMode.MULTIRUN if multirun else RunMode.RUN
        return hydra.compose_config(args.config_name or app.config_name, overrides, mode)
    finally:
        GlobalHydra.instance().clear()


def chosen(argv: list[str], key: str, app: App = TRAIN) -> Any:
    """The value of `key` in the config that argv composes (None when it does not compose:
    Hydra then says why)."""
    parsed = parse_argv(argv)
    if parsed is None:
        return None

    try:
        return OmegaConf.select(compose(app, parsed[0], parsed[0].overrides), key)
    except Exception:  # noqa: BLE001 (Hydra reports it when it composes for real)
        return None
