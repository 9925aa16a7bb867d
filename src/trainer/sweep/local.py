"""The local (offline) backend: create or reopen a sweep in its directory (`hydra.sweep.dir`, or
<root>/sweeps/<id>/), run local agent processes on it until it ends, then report (leaderboard,
results.json, best.yaml)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trainer.config.rules import ConfigError
from trainer.errors import TrainerError
from trainer.sweep.agents import cpu_share
from trainer.sweep.agents.gpu_slots import DevicePlan, agent_count
from trainer.sweep.agents.launched import JOB_DIR, AgentJob, env_added
from trainer.sweep.agents.outcome import INTERRUPT_CODES
from trainer.sweep.definition import drift, warm_start
from trainer.sweep.options import AgentHooks, SweepOptions
from trainer.sweep.report import leaderboard
from trainer.sweep.report.watch import LiveStatus
from trainer.sweep.search import dispatch, space
from trainer.sweep.search.repeats import Repeats
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import (
    SweepLayout,
    create,
    find,
    join_command,
    new_id,
    sweep_id_of,
    write_sweep_yaml,
)
from trainer.sweep.store.opening import open_store, password_env, require_reachable

LIVE_S = 1.0  # how often the live status is redrawn
RUNNER_KEY = "runner"  # the store key: how the sweep command last ran its agents


def runner(options: SweepOptions, hooks: AgentHooks) -> dict:
    """How this command runs the sweep's agents, kept for `python -m trainer.sweep extend`:
    their number and count, and whether they were jobs of a Hydra launcher."""
    return {
        "agents": options.agents,
        "count": options.count,
        "cpus_per_trial": options.cpus_per_trial,
        "launcher": hooks.start_agents is not None,
    }


def _agent_argv(layout: SweepLayout, options: SweepOptions) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "trainer.agent",
        str(layout.root),  # by directory: wherever the sweep lives
        "--max-consecutive-failures",
        str(options.max_consecutive_failures),
        "--no-report",  # run_sweep reports once, after all its agents
    ]
    if options.count is not None:
        argv += ["--count", str(options.count)]
    if options.rerun_crashed:
        argv.append("--rerun-crashed")
    return argv


def _create(
    config: dict, root: Path, directory: Path | None, storage: str | None = None
) -> tuple[str, SweepLayout, SweepStore]:
    require_reachable(storage)  # a bad URL: the error now, and no sweep folder left behind
    if directory is not None and SweepLayout(directory).exists():
        _held_definition(config, SweepLayout(Path(directory).resolve()))
    sweep_id = new_id()
    layout = create(root, sweep_id, directory)
    store = open_store(layout.root, storage, sweep_id)
    store.set("config", config)
    store.set("sweep_id", sweep_id)
    store.set("created_at", time.time())
    write_sweep_yaml(config, layout.yaml)
    print(f"sweep {sweep_id}: created {layout.root}", flush=True)
    return sweep_id, layout, store


def _same_definition(
    given: str, sweep_id: str, layout: SweepLayout, store: SweepStore, config: dict, new_sweep: str
) -> None:
    """The sweep command's definition is the sweep's own (drift.check: the difference key by
    key and the ways on, exit 2). An empty `config` resumes with the stored one, unchecked; so
    does the definition of an earlier revision (the command that started a sweep extended
    since: it resumes the sweep as it now stands, its current revision, with a note)."""
    if not config or store.config is None or not drift.differences(store.config, config):
        return
    revisions = store.get(space.REVISIONS_KEY) or []
    earlier = [r["revision"] for r in revisions if not drift.differences(r["config"], config)]
    if earlier and earlier[-1] < space.revision(store):
        print(
            f"sweep {sweep_id}: this command gives revision {earlier[-1]} of its definition, "
            f"extended since: resuming with its current revision {space.revision(store)} "
            f"({layout.yaml})",
            flush=True,
        )
        return
    drift.check(given, sweep_id, layout.yaml, store.config, config, new_sweep)


def _held_definition(config: dict, layout: SweepLayout) -> None:
    """hydra.sweep.dir already holds a sweep and no sweep_id was given: a different definition
    is refused with its difference (the same one falls to create(), which says how to resume).
    The directory says where its store is (sweep.db, or the server its storage.yaml names)."""
    store = open_store(layout.root)
    try:
        _same_definition(
            f"hydra.sweep.dir={layout.root}",
            sweep_id_of(store, layout),
            layout,
            store,
            config,
            "set hydra.sweep.dir to a new directory",
        )
    finally:
        store.close()


def _same_repeats(sweep_id: str, store: SweepStore, asked: Repeats | None) -> None:
    """A resumed sweep repeats as it was created: hydra.sweeper.repeats given anew and
    different is refused (a sweep's configurations cannot change their number of seeds)."""
    kept = Repeats.of_store(store)
    if asked is None or asked == kept:
        return
    was = kept.count if kept is not None else 1
    raise ConfigError(
        f"hydra.sweeper.repeats={asked.count} (seeds {', '.join(map(str, asked.seeds))}) "
        f"differs from sweep {sweep_id}'s {was} (kept in its store since it was created): "
        "resume it without hydra.sweeper.repeats, or start a new sweep to repeat differently"
    )


def _reopen(
    sweep_id: str,
    root: Path,
    directory: Path | None,
    storage: str | None = None,
    config: dict | None = None,
) -> tuple[str, SweepLayout, SweepStore]:
    """The sweep to resume: the one in hydra.sweep.dir when that holds one, else found by id;
    with the same definition as `config` (drift.check), before anything in it changes."""
    if directory is not None and SweepLayout(directory).exists():
        layout = SweepLayout(Path(directory).resolve())
    else:
        layout = find("hydra.sweeper.sweep_id", sweep_id, root)
    store = open_store(layout.root, storage, sweep_id)
    found = sweep_id_of(store, layout)
    if found != sweep_id and Path(sweep_id).expanduser().resolve() != layout.root:
        store.close()
        raise TrainerError(
            f"hydra.sweeper.sweep_id={sweep_id}: hydra.sweep.dir={layout.root} holds sweep "
            f"{found}; resume that one with hydra.sweeper.sweep_id={found}, or drop "
            "hydra.sweep.dir to find the sweep by its id."
        )
    try:
        _same_definition(
            f"hydra.sweeper.sweep_id={sweep_id}",
            found,
            layout,
            store,
            config or {},
            "drop hydra.sweeper.sweep_id"
            + (" and set hydra.sweep.dir to a new directory" if directory is not None else ""),
        )
    except drift.DefinitionDrift:
        store.close()
        raise
    lost = store.mark_lost_runs()
    print(
        f"sweep {found}: resuming {layout.root}"
        + (
            f" ({len(lost)} lost run(s) given back to the sweep: {', '.join(lost)})" if lost else ""
        ),
        flush=True,
    )
    return found, layout, store


def agent_env(root: Path, slot: int, slots: int, cpus_per_trial: int | None) -> dict[str, str]:
    """Agent `slot` of the `slots` a sweep command starts together: its CPU slot, its root."""
    return {
        **os.environ,
        "TRAINER_OUTPUT_DIR": str(root),
        **cpu_share.slot_env(slot, slots, cpus_per_trial),
    }


def _run_processes(
    argv: list[str], envs: list[dict[str, str]], live: LiveStatus | None = None
) -> list[int]:
    """One local agent process per environment; their exit codes once all have ended. With a
    `live` status (the command's output is a terminal) the agents write to their logs and the
    status shows the sweep; an agent that did not end well has its last lines shown after."""
    if live is None:
        procs = [subprocess.Popen(argv, env=env) for env in envs]
        return _wait(procs)
    logs = [live.agent_log(i) for i in range(len(envs))]
    procs = [
        subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        for env, log in zip(envs, logs, strict=True)
    ]
    with live:
        codes = _wait(procs, live.refresh)
    for i, (code, log) in enumerate(zip(codes, logs, strict=True)):
        log.close()
        if code != 0:
            print(f"agent {i} (exit code {code}), last lines of {live.logs[i]}:\n{live.tail(i)}")
    return codes


def _wait(procs: list[subprocess.Popen], tick: Callable[[], None] | None = None) -> list[int]:
    """The processes' exit codes once all have ended, `tick()` about every second meanwhile."""
    try:
        while tick is not None and any(p.poll() is None for p in procs):
            tick()
            time.sleep(LIVE_S)
        return [p.wait() for p in procs]
    except KeyboardInterrupt:  # Ctrl-C reached the agents too: each stops and records its trial
        return [p.wait() for p in procs]


def live_status(store: SweepStore, sweep_id: str, layout: SweepLayout) -> LiveStatus | None:
    """A live status when the command's output is a terminal (plain lines otherwise: a log, CI,
    a pipe)."""
    if not sys.stdout.isatty() or os.environ.get("TERM") == "dumb":
        return None
    return LiveStatus(store, sweep_id, layout)


def _killed(slot: int, code: int) -> int:
    """An agent killed by a signal (SIGKILL, the OOM killer) did not give up: the run it held is
    lost and goes back to the sweep (its other agents resume it). Said here; counts as 0."""
    if code >= 0:
        return code
    name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
    print(
        f"agents: agent {slot} was killed ({name}); the run it held went back to the sweep for "
        "the other agents",
        flush=True,
    )
    return 0


def _created_or_reopened(
    config: dict,
    options: SweepOptions,
    root: Path,
    directory: Path | None,
    repeats: Repeats | None,
) -> tuple[str, SweepLayout, SweepStore]:
    """A new sweep (with its repeats' seeds and hydra.sweeper.warm_start's earlier runs kept in
    its store), or the one options.sweep_id names, reopened."""
    storage = options.storage
    if options.sweep_id is not None:
        sweep_id, layout, store = _reopen(options.sweep_id, root, directory, storage, config)
        _same_repeats(sweep_id, store, repeats)
        if options.warm_start:
            print(
                f"sweep {sweep_id}: note: hydra.sweeper.warm_start seeds a new sweep only; "
                "ignored on a resumed one",
                flush=True,
            )
        return sweep_id, layout, store
    warm = warm_start.gather(options.warm_start, config, root, storage)  # refused: no folder
    sweep_id, layout, store = _create(config, root, directory, storage)
    if repeats is not None:  # kept with the sweep: agents that join later repeat too
        repeats.record(store)
    if warm is not None:  # kept with the sweep: every agent's engine is told them
        warm.record(store)
        print(f"sweep {sweep_id}: {warm.said()}", flush=True)
    return sweep_id, layout, store


def run_sweep(
    config: dict,
    options: SweepOptions | None = None,
    *,
    root: str | Path,
    directory: str | Path | None = None,
    devices: DevicePlan | None = None,
    hooks: AgentHooks | None = None,
    repeats: Repeats | None = None,
) -> dict:
    """Create (options.sweep_id None) or reopen (sweep_id given) the local sweep in `directory`
    (the user's hydra.sweep.dir) or <root>/sweeps/<sweep_id>/, run `options.agents` local agent
    processes (None: one per device slot of `devices`, else 1; each at most `options.count`
    trials; trials get GPUs from `devices`) until the sweep ends, print the leaderboard, write
    results.json and best.yaml, and return the results dict. `hooks`: what runs before the
    agents (hydra.sweeper.prewarm) and the user's Hydra launcher that starts them as jobs;
    `repeats`: the seeds of hydra.sweeper.repeats, kept in a new sweep's store."""
    options = options or SweepOptions()
    hooks = hooks or AgentHooks()
    storage = options.storage
    root = Path(root).resolve()
    directory = Path(directory).resolve() if directory is not None else None
    sweep_id, layout, store = _created_or_reopened(config, options, root, directory, repeats)
    _start(store, sweep_id)
    store.set("max_retries", options.max_retries)  # how often a lost run is handed out again
    store.set(RUNNER_KEY, runner(options, hooks))  # `extend` runs the new runs the same way
    if devices is not None:  # the GPUs its agents hand out (gpu_slots), this command's choice
        store.set("devices", devices.to_dict())
    hint = join_command(sweep_id, root, layout.root)
    print(f"sweep {sweep_id}: join from another terminal with {hint}", flush=True)
    if hooks.before_agents is not None:
        hooks.before_agents(layout)
    argv = _agent_argv(layout, options)
    n = max(agent_count(options.agents, devices), 1)  # agent i of n takes slot i of the CPUs
    envs = [agent_env(root, i, n, options.cpus_per_trial) for i in range(n)]
    if hooks.start_agents is not None:  # no password in a job's files: PGPASSWORD or ~/.pgpass
        argv += ["--paused-wait", str(options.paused_wait_s)]  # a job leaves a paused sweep
        jobs = [AgentJob(argv, env_added(env), os.getcwd()) for env in envs]
        codes = hooks.start_agents(jobs, layout.root / JOB_DIR)
    else:
        envs = [{**env, **password_env(storage)} for env in envs]
        codes = _run_processes(argv, envs, live_status(store, sweep_id, layout))
    codes = [_killed(i, code) for i, code in enumerate(codes)]
    res = _report(store, sweep_id, layout, codes, hint)
    store.close()
    return res


def _start(store: SweepStore, sweep_id: str) -> None:
    """The sweep runs, unless its owner paused, stopped or cancelled it: that state stands
    (only `python -m trainer.sweep resume` undoes a pause), and its agents obey it."""
    state, change = store.lifecycle()
    if state not in steering.HALTED:
        store.set("state", "running")
        return
    how = change.said() if change else state
    then = (
        f"its agents wait until python -m trainer.sweep resume {sweep_id}"
        if state == steering.PAUSED
        else "no new run starts; its agents exit at once"
    )
    print(f"sweep {sweep_id}: {how}: {then}", flush=True)


def _report(
    store: SweepStore, sweep_id: str, layout: SweepLayout, codes: list[int], hint: str
) -> dict:
    """Once the agents have ended: the sweep's state, its report (results.json, best.yaml,
    sweep.png, the leaderboard) and the results with the agents' exit codes and the runs that
    still wait to resume; with runs left to hand out, how to go on (`hint`: the join command)."""
    store.mark_lost_runs()  # runs its agents held when they were killed go back to the sweep
    interrupted = [c for c in codes if c in INTERRUPT_CODES]
    gave_up = any(code != 0 and code not in INTERRUPT_CODES for code in codes)
    running = [r for r in store.runs() if r.state in ("running", "preempted")]
    state = "failed" if gave_up else ("running" if running else "finished")
    state = "interrupted" if interrupted and not gave_up else state
    steered = store.lifecycle()[0]
    if steered in steering.HALTED:  # its owner's state stands (paused, stopped, cancelled)
        shown = steered
    else:
        shown = dispatch.sweep_state(state, store)
        store.set("state", shown.split(" ")[0])
    res = leaderboard.write_final(store, sweep_id, layout)
    res["agent_exit_codes"] = codes
    res["to_resume"] = [r.id for r in running if r.state == "preempted"]  # no agent took them
    leaderboard.print_leaderboard(res)
    if shown.startswith("stopped") and steered not in steering.HALTED:
        print(runs_left(sweep_id, shown, hint), flush=True)
    if steered == steering.PAUSED:
        print(
            f"sweep {sweep_id} is paused; after python -m trainer.sweep resume {sweep_id}, go on "
            f"with {hint}",
            flush=True,
        )
    return res


def runs_left(sweep_id: str, shown: str, hint: str) -> str:
    """What a sweep whose agents ended with runs left says (they took hydra.sweeper.count each,
    or stopped early): how many ran and how to go on."""
    done = shown.removeprefix("stopped").strip(" ()")
    return (
        f"sweep {sweep_id} stopped with runs left ({done}): its agents took their "
        f"hydra.sweeper.count; go on with {hint}"
    )
