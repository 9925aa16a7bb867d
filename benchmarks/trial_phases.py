"""Where a sweep trial's own start-up and exit go, phase by phase: trials forked from a process
that imported what the trial template imports and keeps what it composed (as a template's trials
are), each run as the template runs it (`run_as_main`), with named steps timed (wall ms, median of
the trials; the first trial composes in full, as a template's first does).
benchmarks.sweep_peers runs it beside its 1-second trials; it prints one JSON object.

    python -m benchmarks.trial_phases --trials 5 --steps 120 [override ...]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from trainer.sweep.agents import template

COPIES = "hydra.core.utils.copy"  # run_job's deep copies (not every deepcopy of the process)
# (module, attribute, phase): the steps of a trial's start-up, timed where they are called.
STEPS = [
    ("trainer.config.overrides", "_parse_argv", "command line: parsed"),
    ("trainer.config.overrides", "check_overrides", "command line: keys checked"),
    ("hydra._internal.hydra", "Hydra.compose_config", "Hydra: compose"),
    ("hydra.core.hydra_config", "HydraConfig.set_config", "Hydra: job config"),
    (COPIES, "deepcopy", "Hydra: run_job's copies of the config"),
    ("hydra.core.utils", "_save_config", "Hydra: .hydra/ files"),
    ("hydra.core.utils", "configure_log", "Hydra: logging"),
    ("trainer.run", "validate", "checks (schema, machine)"),
    ("trainer.run", "seed_everything", "seeding"),
    ("trainer.run", "build_run_data", "data"),
    ("trainer.run", "build_state", "model, optimizer, state"),
    ("trainer.run", "open_compile_cache", "compile cache session"),
    ("trainer.run", "compile_model", "compile decision"),
    ("trainer.run", "open_tracker", "tracker"),
]
# After training (in "exit"): the summary's terminal lines.
EXIT_STEPS = [("trainer.run", "print_summary", "exit: summary printed")]
STARTUP = "start-up, all"  # fork to training set up (FitPlan)
REST = "start-up, the rest"  # the calls between the steps: run dir, threads, data plan, ...
EXIT = "exit"  # training's end (summary written) to the process's end


def _timed(times: dict[str, float], module: str, attribute: str, phase: str) -> None:
    if module == COPIES:  # Hydra's run_job copies through its module's `copy`: a copy of that
        utils = importlib.import_module("hydra.core.utils")
        utils.copy = types.SimpleNamespace(copy=utils.copy.copy, deepcopy=utils.copy.deepcopy)
        owner: Any = utils.copy
    else:
        owner = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times[phase] = times.get(phase, 0.0) + time.perf_counter() - started

    setattr(owner, name, timed)


def one_trial(args: list[str], times: dict[str, float]) -> None:
    """In a forked child: the trial `python -m trainer *args`, as the template runs it."""
    run_module = sys.modules["trainer.run"]  # among the template's imports
    fit, ends = run_module.fit, {}

    def fit_timed(plan: Any) -> Any:
        times[STARTUP] = time.perf_counter() - started
        try:
            return fit(plan)
        finally:
            ends["fit"] = time.perf_counter()

    run_module.fit = fit_timed
    for module, attribute, phase in STEPS + EXIT_STEPS:
        _timed(times, module, attribute, phase)
    template.forget_template_finalizers()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.argv = ["-m", *args]
    started = time.perf_counter()
    code = template.run_as_main("trainer")
    times[EXIT] = time.perf_counter() - ends.get("fit", started)
    times["code"] = code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("overrides", nargs="*", help="every trial's fixed overrides")
    args = parser.parse_args(argv)
    warm = template.prepare(["--no-compiler", "--no-wandb"])  # as the template prepares
    gc.collect()
    gc.freeze()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            read, write = os.pipe()
            trial = [*args.overrides, f"trainer.max_steps={args.steps}", f"trainer.seed={i}"]
            trial += [f"hydra.run.dir={Path(tmp) / str(i)}", "hydra.mode=RUN"]
            pid = os.fork()
            if pid == 0:  # the trial: its phases go back through the pipe
                os.close(read)
                times: dict[str, float] = {}
                try:
                    one_trial(trial, times)
                finally:
                    os.write(write, json.dumps(times).encode())
                    os._exit(0)
            os.close(write)
            warm(trial, os.getcwd())  # as the template does after each fork
            with os.fdopen(read) as pipe:
                times = json.loads(pipe.read() or "{}")
            os.waitpid(pid, 0)
            if times.get("code") != 0:
                raise SystemExit(f"trial {i} failed: {times}")
            rows.append(times)
    phases = [p for _, _, p in STEPS]
    ends = [p for _, _, p in EXIT_STEPS]
    named = [STARTUP, *phases, EXIT, *ends]
    result = {p: statistics.median(r.get(p, 0.0) for r in rows) for p in named}
    result[REST] = result[STARTUP] - sum(result[p] for p in phases)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
