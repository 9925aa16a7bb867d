"""Whether the sweep command's definition is the one a sweep already runs: the difference key
by key (`differences`), and the refusal that names the two ways on (`extend` the sweep in
place, or a new sweep), so that one leaderboard never mixes two searches.

The definition is the whole W&B configuration the command builds, what sweep.yaml holds:
method, metric(s), parameters, early_terminate, run_cap, scheduler, pbt, name, description and
the trials' `command` (their fixed overrides, config dir and name, torchrun for
gpus_per_trial > 1). How the sweep is run is not in it and may change on every resume: agents,
count, devices, trials_per_device, cpus_per_trial, storage, max_retries, rerun_crashed,
max_consecutive_failures, prewarm, paused_wait_s, the launcher and hydra.sweep.dir."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

from trainer.errors import TrainerError
from trainer.sweep.definition.translate import flatten_parameters

WIDTH = 80  # every line of the refusal fits a terminal this wide
# What `python -m trainer.sweep extend` changes in place; any other difference (the metric,
# the method, the trials' command...) would make the old runs incomparable: a new sweep.
GROWABLE = ("parameters", "run_cap")
UNSET = "unset"
_PLAIN = re.compile(r"^[A-Za-z0-9_.+\-/]+$")  # a value an override carries without quoting
_MISSING = object()  # a key one of the two definitions lacks


class DefinitionDrift(TrainerError):
    """The sweep command's definition differs from the sweep's own (exit 2, nothing started)."""


def _plain(config: dict[str, Any] | None) -> dict[str, Any]:
    """The definition as the store keeps it (JSON: tuples are lists), parameters flat."""
    plain = json.loads(json.dumps(config or {}))
    if isinstance(plain.get("parameters"), dict):
        plain["parameters"] = flatten_parameters(plain["parameters"])
    return plain


def shown(value: Any) -> str:
    """A value as YAML's flow style writes it: {values: [0.1, 0.05]}, 0.001, null."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _line(key: str, old: Any, new: Any) -> str:
    """One difference: `key: was OLD, now NEW`; two long lists say what left and what came."""
    was = UNSET if old is _MISSING else shown(old)
    now = UNSET if new is _MISSING else shown(new)
    line = f"{key}: was {was}, now {now}"
    if len(line) > WIDTH - 2 and isinstance(old, list) and isinstance(new, list):
        dropped = [v for v in old if v not in new]
        added = [v for v in new if v not in old]
        if dropped or added:
            line = f"{key}: dropped {shown(dropped)}, added {shown(added)}"
        else:
            line = f"{key}: the same items in another order, now {now}"
    return line


def _walk(old: Any, new: Any, key: str) -> list[str]:
    """The differences below `key`: mappings key by key (a parameter's spec whole), else the
    value itself."""
    is_spec = key.startswith("parameters.")
    if isinstance(old, dict) and isinstance(new, dict) and not is_spec:
        found = []
        for name in [*old, *(k for k in new if k not in old)]:
            path = f"{key}.{name}" if key else str(name)
            found += _walk(old.get(name, _MISSING), new.get(name, _MISSING), path)
        return found
    return [] if old == new else [_line(key, old, new)]


def differences(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """Each difference between two sweep definitions, one line per key, in the old one's
    order: `parameters.optimizer.lr: was {values: [0.1, 0.05]}, now {values: [0.1, 0.05,
    0.02]}`, `run_cap: was 8, now unset`; none when they are the same."""
    return _walk(_plain(old), _plain(new), "")


def changed_keys(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """The top-level keys of the definition that differ (parameters, run_cap, metric...)."""
    old, new = _plain(old), _plain(new)
    keys = [*old, *(k for k in new if k not in old)]
    return [k for k in keys if old.get(k, _MISSING) != new.get(k, _MISSING)]


def _override(key: str, spec: Any) -> str | None:
    """The `extend` override of a parameter's new spec, when a plain value or list says it."""
    if not isinstance(spec, dict):
        return None
    values = spec.get("values", [spec["value"]] if "value" in spec else None)
    if not values or set(spec) - {"values", "value"}:
        return None
    texts = [shown(v) for v in values]
    return f"{key}={','.join(texts)}" if all(_PLAIN.match(t) for t in texts) else None


def extend_overrides(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str] | None:
    """The overrides that give `extend` the new definition (a grid value added, run_cap), or
    None when a difference needs words (a distribution) or no extend can make it."""
    old, new = _plain(old), _plain(new)
    overrides = []
    if old.get("run_cap") != new.get("run_cap"):
        overrides.append(f"hydra.sweeper.run_cap={shown(new.get('run_cap'))}")
    before, after = old.get("parameters") or {}, new.get("parameters") or {}
    for key in [*before, *(k for k in after if k not in before)]:
        if before.get(key) != after.get(key):
            override = _override(key, after.get(key))
            if override is None:
                return None
            overrides.append(override)
    return overrides


def _wrapped(line: str, indent: str = "  ") -> str:
    return textwrap.fill(line, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _shown_difference(line: str) -> str:
    """One difference in 80 columns: on its line, else its `now` under its `was`."""
    was, comma, now = line.partition(", now ")
    if len(line) + 2 <= WIDTH or not comma:
        return _wrapped(line)
    return _wrapped(was + ",") + "\n" + _wrapped("now " + now, "    ")


def _ways(sweep_id: str, old: Any, new: Any, new_sweep: str) -> list[str]:
    """The ways on: `extend` (when only parameters and run_cap differ), or a new sweep."""
    fixed = [k for k in changed_keys(old, new) if k not in GROWABLE]
    warm = f"hydra.sweeper.warm_start={sweep_id}"
    another = _wrapped(
        f"{'' if fixed else 'or '}start a new sweep: {new_sweep}; add {warm} to tell its engine "
        f"the finished runs of {sweep_id}."
    )
    if fixed:
        return [
            _wrapped(
                f"{', '.join(fixed)} cannot change under the runs of sweep {sweep_id} (extend "
                "grows only its parameters and run_cap), so:"
            ),
            another,
        ]
    overrides = extend_overrides(old, new)
    extend = f"python -m trainer.sweep extend {sweep_id} " + (
        " ".join(overrides) if overrides else "OVERRIDES"
    )
    return [
        _wrapped(
            f"grow sweep {sweep_id} in place, a new revision of its definition with every run "
            "kept and told to its engine:"
        ),
        f"    {extend}",  # whole, to copy
        another,
    ]


def refusal(
    given: str,
    sweep_id: str,
    kept_in: Path,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    new_sweep: str,
) -> str | None:
    """Why the sweep command may not run `new` on sweep `sweep_id` (its definition `old`, in
    `kept_in`), with the differences and the ways on; None when they are the same. `given` is
    the setting that named the sweep, `new_sweep` how this command starts a new one instead."""
    found = differences(old, new)
    if not found:
        return None
    head = (
        f"{given}: this command's sweep definition differs from the one sweep {sweep_id} runs "
        f"(kept in {kept_in}), key by key:"
    )
    indent = " " * len(DefinitionDrift.prefix)  # its first line follows "error: "
    return "\n".join(
        [
            textwrap.fill(head, WIDTH, initial_indent=indent).lstrip(),
            *(_shown_difference(line) for line in found),
            textwrap.fill(
                "One sweep runs one definition, so that its leaderboard never mixes two "
                "searches. The ways on:",
                WIDTH,
            ),
            *_ways(sweep_id, old, new, new_sweep),
            textwrap.fill(
                f"To resume sweep {sweep_id} as it is, give its own definition (its "
                "sweep.yaml). Nothing was started or changed.",
                WIDTH,
            ),
        ]
    )


def check(
    given: str,
    sweep_id: str,
    kept_in: Path,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    new_sweep: str,
) -> None:
    """Raise DefinitionDrift (exit 2) when `new` differs from the sweep's definition `old`."""
    message = refusal(given, sweep_id, kept_in, old, new, new_sweep)
    if message is not None:
        raise DefinitionDrift(message)
