"""`python -m trainer.sweep extend SWEEP OVERRIDES [--no-run] [--default KEY=VALUE]`: grow a sweep
in place. Its definition gets a new revision (trainer.sweep.definition.revision: sweep.yaml
rewritten, the previous kept as sweep.r<N>.yaml, every revision in the store and results.json);
the sweep keeps its id, directory and runs; its engine is told every finished run inside the new
space. Live agents follow at their next claim; a sweep whose agents are gone is run here as the
sweep command ran it (its agents, its count), ending with the leaderboard."""

from __future__ import annotations

import time
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from hydra_plugins.wandb_sweeper.config import RunnerConf
from trainer.sweep.agents.outcome import agent_failure
from trainer.sweep.definition.revision import ExtendError, Revision, new_sweep, revise
from trainer.sweep.local import RUNNER_KEY, run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.report import leaderboard
from trainer.sweep.search import space
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout, join_command, write_sweep_yaml
from trainer.sweep.store.suggestions import SuggestionQueue


def defaults_of(items: list[str]) -> dict[str, Any]:
    """--default KEY=VALUE (repeatable): the value the runs so far had of a parameter added now,
    parsed as Hydra parses a value."""
    found = {}
    for item in items:
        try:
            override = OverridesParser.create().parse_override(item)
        except OverrideParseException as err:
            raise ExtendError(
                f"--default {item}: give KEY=VALUE, the value every run so far had of a "
                f"parameter added now, e.g. --default model.width=64 ({err.message.splitlines()[0]})"
            ) from err
        if override.is_sweep_override() or "=" not in item:
            raise ExtendError(
                f"--default {item}: give one value, KEY=VALUE (the value every run so far had), "
                "e.g. --default model.width=64"
            )
        found[override.key_or_group] = override.value()
    return found


def shown(value: Any) -> str:
    """A value as YAML's flow style writes it: {values: [0.1, 0.05]}, 0.001, null."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _refused_state(state: str, change: steering.Change | None, sweep_id: str) -> str:
    how = f" ({change.said()})" if change is not None and change.state == state else ""
    return (
        f"extend {sweep_id}: the sweep was cancelled{how}: its runs were ended by hand, and "
        f"nothing of it is handed out again. Instead, {new_sweep(sweep_id)}. Nothing was changed."
    )


def record(
    store: SweepStore, layout: SweepLayout, sweep_id: str, base: dict, revision: Revision
) -> int:
    """Make `revision` the sweep's definition in one transaction (refused when the sweep was
    cancelled, or its definition changed since `base` was read), then rewrite sweep.yaml with
    the previous one kept as sweep.r<N>.yaml. A finished or stopped sweep runs again; a paused
    one stays paused. The new revision's number."""
    by, now, runs = steering.who(), time.time(), len(store.runs())
    with store.transaction() as db:
        state, change = store.lifecycle(db)
        if state == steering.CANCELLED:
            raise ExtendError(_refused_state(state, change, sweep_id))
        if store.get("config", None, db) != base:
            raise ExtendError(
                f"extend {sweep_id}: its definition changed while this command read it (another "
                "extend); run the command again. Nothing was changed."
            )
        number = space.revision(store, db)
        revisions = store.get(space.REVISIONS_KEY, None, db) or [
            {"revision": 1, "at": store.get("created_at", None, db), "by": None, "changes": {}}
            | {"runs_before": 0, "config": base}
        ]
        entry = {"revision": number + 1, "at": now, "by": by, "changes": revision.changes}
        revisions.append({**entry, "runs_before": runs, "config": revision.config})
        store.set(space.REVISIONS_KEY, revisions, db)
        store.set("config", revision.config, db)
        store.set(space.REVISION_KEY, number + 1, db)
        SuggestionQueue.reopen(db)  # an optimizer's end and queue were the old space's
        if state in (steering.FINISHED, steering.STOPPED):
            store.set("state", steering.RUNNING, db)
            extended = steering.Change(steering.RUNNING, "extend", by, now)
            store.set(steering.STEERED_KEY, extended.to_dict(), db)
    write_sweep_yaml(base, layout.revision(number))
    write_sweep_yaml(revision.config, layout.yaml)
    return number + 1


def _said(sweep_id: str, number: int, layout: SweepLayout, revision: Revision, store) -> str:
    """What changed, and which runs the engine is told."""
    lines = [
        f"sweep {sweep_id}: revision {number} of its definition in {layout.yaml} (revision "
        f"{number - 1} kept as {layout.revision(number - 1).name}), by {steering.who()}:"
    ]
    lines += [
        f"  {key}: was {shown(a)}, now {shown(b)}" for key, (a, b) in revision.changes.items()
    ]
    ended = [r for r in store.runs() if r.state in ("finished", "stopped") and not r.superseded]
    told = space.told(revision.config, ended)
    outside = len(ended) - len(told)
    lines.append(
        f"its engine is told the {len(told)} finished run(s) inside the new space"
        + (f"; {outside} outside it stay in the leaderboard, out of its model" if outside else "")
        + "; none is run again"
    )
    return "\n".join(lines)


def extend(
    store: SweepStore,
    layout: SweepLayout,
    sweep_id: str,
    overrides: list[str],
    *,
    root: Any,
    storage: str | None = None,
    defaults: dict[str, Any] | None = None,
    run: bool = True,
) -> int:
    """Revise the sweep's definition by `overrides` and, with `run` and no live agent, run its
    new runs here as the sweep command did, ending with its leaderboard."""
    base = store.config
    state, change = store.lifecycle()
    if state == steering.CANCELLED:
        raise ExtendError(_refused_state(state, change, sweep_id))
    best = leaderboard.results(store, sweep_id).get("best")
    revision = revise(base, overrides, sweep_id, best=best, defaults=defaults)
    number = record(store, layout, sweep_id, base, revision)
    print(_said(sweep_id, number, layout, revision, store), flush=True)
    leaderboard.write(store, sweep_id, layout)  # results.json lists the revision now
    hint = join_command(sweep_id, root, layout.root)
    live = store.live_agents()
    settings = store.get(RUNNER_KEY) or {}
    if live:
        print(
            f"sweep {sweep_id}: its {len(live)} live agent(s) take the new runs at their next claim"
        )
        return 0
    if state == steering.PAUSED:
        print(
            f"sweep {sweep_id} is paused: after python -m trainer.sweep resume {sweep_id}, run it with {hint}"
        )
        return 0
    if not run:
        print(f"sweep {sweep_id}: run its new runs with {hint}")
        return 0
    if settings.get("launcher"):
        print(
            f"sweep {sweep_id}: its agents ran as jobs of a Hydra launcher, which only the sweep "
            f"command starts: start {hint} in job scripts, or the sweep command with "
            f"hydra.sweeper.sweep_id={sweep_id} and its launcher, as it was started (it runs "
            f"the new revision, {layout.yaml})"
        )
        return 0
    options = SweepOptions(
        sweep_id=sweep_id,
        storage=storage,
        agents=revision.run.get("agents", settings.get("agents")),
        count=revision.run.get("count", settings.get("count")),
        cpus_per_trial=settings.get("cpus_per_trial"),
        max_retries=store.get("max_retries", RunnerConf.max_retries),
    )
    store.close()
    result = run_sweep({}, options, root=root, directory=layout.root)
    failure = agent_failure(result)
    if failure is not None:
        raise failure
    return 0
