"""What each of the local sweep's own mechanisms buys on a realistic sweep (trials of about a
minute): the trial template and the compile-cache bundle's file watcher. (The standby agents,
measured by this benchmark until they were removed, are in benchmarks/README.md.)

- Trial template: the same sweep (`--trials` seeds of small_cnn on `data=fake`, `--epochs`
  epochs, compile default, one agent), typed as a user types it, with trials forked from the
  agent's template (the default) and with `TRAINER_TRIAL_TEMPLATE=0` (each trial a new
  process), in one cache dir that a `compile.warm_only=true` run of the workload filled first
  (every trial hits it). Per trial: hand-out to training loop (s), the CPU seconds the trial process spent
  until its loop started (read from /proc every 50 ms and interpolated at the loop's start, so
  other load on the machine barely moves it), its wall and CPU time; per mode the template's own
  CPU (its imports, once per agent) and the whole sweep's CPU (every process it started).
- Watcher: steady training steps of the same workload in a process with the watcher's audit hook
  watching the cache dir against one without the hook (fresh processes, alternating), wall and
  CPU per step; the hook's cost per audited event and the events per step; and the sweep's
  bundles against the whole cache dir, with what a before/after diff of the cache dir found
  around each sweep (its trials hit the cache for every graph: nothing new).

Load average at start and end is recorded. Writes sweep_mechanisms.md and .json under
outputs/benchmarks/ (`--out DIR` elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.sweep_mechanisms --publish          # the published run, ~10 min on 2 CPUs
    python -m benchmarks.sweep_mechanisms --trials 1 --epochs 1 --max-steps 2 --samples 128 \
        --watcher-rounds 1 --watcher-steps 5 --compile off   # a check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from benchmarks import destination, md_table
from trainer.cache.entries import cache_files
from trainer.config.hydra_version import VERSION_BASE
from trainer.sweep.agents.trial_start import ENV_SWITCH
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout

REPO = Path(__file__).resolve().parent.parent
ONE_MINUTE = 60.0
POLL_S = 0.05
SECTIONS = ("## Trial template", "## Compile-cache watcher")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=3, help="trials per template/process sweep")
    p.add_argument("--epochs", type=int, default=5, help="epochs per trial (about a minute)")
    p.add_argument("--max-steps", type=int, default=None, help="cap on steps per trial (checks)")
    p.add_argument("--samples", type=int, default=1024, help="fake training images (32x32)")
    p.add_argument("--batch", type=int, default=64, help="samples per training step")
    p.add_argument("--width", type=int, default=32, help="small_cnn width of the sweeps")
    p.add_argument("--compile", default="default", help="compile group of every trial")
    p.add_argument("--watcher-steps", type=int, default=100, help="timed steps per process")
    p.add_argument("--watcher-rounds", type=int, default=3, help="rounds of the watcher pair")
    p.add_argument("--watcher-child", choices=("none", "hook"), help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, default=None, help=argparse.SUPPRESS)
    destination.add_arguments(p)
    return p.parse_args(argv)


# ---------------------------------------------------------------- processes and their CPU time


class TreeSampler(threading.Thread):
    """Every POLL_S, the CPU seconds (user + system, all threads) of a process and of every
    process below it; `cpu_at(pid, t)` interpolates one process's at a wall-clock time."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.samples: dict[int, list[tuple[float, float]]] = {}
        self.cmdlines: dict[int, str] = {}
        self.parents: dict[int, int] = {}  # pid -> its parent's, when first seen
        self.procs: dict[int, psutil.Process] = {pid: self.root}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                for child in self.root.children(recursive=True):
                    self.procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
            now = time.time()
            for pid, proc in list(self.procs.items()):
                try:
                    times = proc.cpu_times()
                    if pid not in self.cmdlines:
                        self.cmdlines[pid] = " ".join(proc.cmdline())
                        self.parents[pid] = proc.ppid()
                except psutil.Error:
                    continue
                self.samples.setdefault(pid, []).append((now, times.user + times.system))
            self.done.wait(POLL_S)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def cpu_at(self, pid: int | None, t: float | None) -> float | None:
        points = self.samples.get(pid or -1)
        if not points or t is None:
            return None
        before = [p for p in points if p[0] <= t]
        after = [p for p in points if p[0] >= t]
        if not before:
            return after[0][1]
        if not after:
            return before[-1][1]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)

    def cpu_last(self, pid: int | None) -> float | None:
        points = self.samples.get(pid or -1)
        return points[-1][1] if points else None

    def pids(self, needle: str) -> list[int]:
        return [pid for pid, line in self.cmdlines.items() if needle in line]


def children_cpu_s() -> float:
    """CPU seconds of every finished process this one waited for (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def trial_overrides(args: argparse.Namespace, seeds: int, width: int, steps: int | None) -> list:
    fixed = [
        "hydra/sweeper=wandb",
        "hydra.sweeper.method=grid",
        "hydra.sweeper.metric.name=val/acc",
        "hydra.sweeper.metric.goal=maximize",
        f"trainer.seed=choice({','.join(str(s) for s in range(seeds))})",
        "model=small_cnn",
        f"model.width={width}",
        "data=fake",
        f"data.num_samples={args.samples}",
        f"data.batch_size={args.batch}",
        f"compile={args.compile}",
        "logger=none",
    ]
    if steps is not None:
        return [*fixed, "trainer.max_epochs=1", f"trainer.max_steps={steps}"]
    fixed.append(f"trainer.max_epochs={args.epochs}")
    return fixed + ([f"trainer.max_steps={args.max_steps}"] if args.max_steps else [])


def sweep_command(overrides: list[str], sweep_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """One sweep command, started as a user starts it: its timeline, its trials' rows with their
    CPU seconds, its processes' CPU."""
    argv = [sys.executable, "-m", "trainer", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    lines: list[tuple[float, str]] = []
    cpu_before = children_cpu_s()
    load_before = os.getloadavg()[0]
    t0 = time.time()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=sweep_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    sampler = TreeSampler(proc.pid)
    sampler.start()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append((time.time(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    wall = time.time() - t0
    reader.join()
    sampler.stop()
    cpu = children_cpu_s() - cpu_before
    if code != 0:
        tail = "\n".join(line for _, line in lines[-40:])
        raise SystemExit(f"the sweep command failed ({code}): {' '.join(argv)}\n{tail}")
    created = next((t for t, line in lines if re.search(r"^sweep \S+: created", line)), None)
    store = SweepStore(SweepLayout(sweep_dir).db)
    rows = []
    for run in sorted(store.runs(), key=lambda r: r.seq):
        perf = (run.summary or {}).get("perf", {})
        loop = perf.get("loop_started_at")
        rows.append(
            {
                "trial": run.seq,
                "state": run.state,
                "pid": run.pid,
                "handed_out_s": run.created_at - t0,
                "loop_s": None if loop is None else loop - t0,
                "handout_to_loop_s": None if loop is None else loop - run.created_at,
                "start_cpu_s": sampler.cpu_at(run.pid, loop),
                "trial_s": None if run.ended_at is None else run.ended_at - run.created_at,
                "trial_cpu_s": sampler.cpu_last(run.pid),
                "compile_s": perf.get("compile_s"),
                "cache_misses": _misses((run.summary or {}).get("compile", {})),
            }
        )
    store.close()
    # A forked trial keeps its template's command line, and so does the trial the template
    # forks ahead of its request (its spare): the template is the one not forked from another.
    forked = sampler.pids("trainer.sweep.agents.template")
    templates = [p for p in forked if sampler.parents.get(p) not in forked]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "load": [load_before, os.getloadavg()[0]],
        "checks_s": None if created is None else created - t0,
        "first_loop_s": rows[0]["loop_s"] if rows else None,
        "template_cpu_s": sum(sampler.cpu_last(p) or 0.0 for p in templates),
        "templates": len(templates),
        "rows": rows,
    }


# ---------------------------------------------------------------- the three measurements


def _misses(stats: dict) -> int | None:
    if not stats.get("enabled"):
        return None
    return int(stats.get("fxgraph_cache_miss", 0)) + int(stats.get("aot_autograd_cache_miss", 0))


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def template_vs_process(args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> dict:
    """The realistic sweep with forked trials, then with new processes, in one cache dir that
    a warm-only run of the workload filled first: every trial of both sweeps hits it."""
    result: dict[str, Any] = {}
    cache = Path(env["TRAINER_CACHE_DIR"])
    if args.compile != "off":
        print("trial template: filling the cache dir (compile.warm_only=true) ...", flush=True)
        fixed = [o for o in trial_overrides(args, 1, args.width, None) if _trial_key(o)]
        argv = [sys.executable, "-m", "trainer", *fixed, "compile.warm_only=true"]
        proc = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(
                f"the warm-only run failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
    for mode, switch in (("template", "1"), ("process", "0")):
        before = cache_files(cache)
        print(f"trial template: sweep with {mode} ...", flush=True)
        folder = tmp / f"sweep-{mode}"
        overrides = trial_overrides(args, args.trials, args.width, None)
        run = sweep_command(overrides, folder, {**env, ENV_SWITCH: switch})
        after = cache_files(cache)
        run["bundle"] = folder_size(SweepLayout(folder).compile_cache)
        new = {f: s for f, s in after.items() if f not in before}
        run["cache_diff"] = {"files": len(new), "bytes": sum(new.values())}
        result[mode] = run
    return result


def _trial_key(override: str) -> bool:
    """An override of the trial itself (not of the sweeper, nor the swept seed)."""
    return not override.startswith(("hydra", "trainer.seed="))


def template_summary(runs: dict) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for mode, run in runs.items():
        rows = run["rows"]
        later = rows[1:] or rows
        summary[mode] = {
            "first trial handout_to_loop_s": rows[0]["handout_to_loop_s"],
            "later trials handout_to_loop_s": _median([r["handout_to_loop_s"] for r in later]),
            "later trials start_cpu_s": _median([r["start_cpu_s"] for r in later]),
            "trial_s": _median([r["trial_s"] for r in rows]),
            "trial_cpu_s": _median([r["trial_cpu_s"] for r in rows]),
            "template_cpu_s": run["template_cpu_s"],
            "sweep wall s": run["wall_s"],
            "sweep cpu s": run["cpu_s"],
            "load": "→".join(f"{v:.2f}" for v in run["load"]),
        }
    if {"template", "process"} <= set(summary):
        t, p = summary["template"], summary["process"]
        wall = _diff(p["later trials handout_to_loop_s"], t["later trials handout_to_loop_s"])
        cpu = _diff(p["later trials start_cpu_s"], t["later trials start_cpu_s"])
        trials = len(runs["template"]["rows"]) or 1
        summary["saving"] = {
            "per trial s": wall,
            "per trial cpu s": cpu,
            "share of a one-minute trial": None if wall is None else wall / ONE_MINUTE,
            "share of this sweep's median trial": _ratio(wall, p["trial_s"]),
            "share of this sweep's median trial cpu": _ratio(cpu, p["trial_cpu_s"]),
            "template cpu s per trial": t["template_cpu_s"] / trials,
            "sweep wall s": _diff(p["sweep wall s"], t["sweep wall s"]),
            "sweep cpu s": _diff(p["sweep cpu s"], t["sweep cpu s"]),
        }
    return summary


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def watcher_child(args: argparse.Namespace) -> None:
    """In a fresh process: steady training steps of the sweep's workload, with the watcher's
    audit hook on the cache dir or without; then the hook's cost per audited event and the
    events a step raises. Prints one JSON line."""
    import torch.nn.functional as F
    from hydra import compose, initialize_config_dir

    from trainer.cache import entries
    from trainer.compiling.apply import configure_cache
    from trainer.config.paths import conf_dir
    from trainer.data.plan import build_data
    from trainer.hardware import threads
    from trainer.preflight import validate
    from trainer.train.models import build_model, input_spec
    from trainer.train.optim import build_optimizer

    overrides = [
        "model=small_cnn",
        f"model.width={args.width}",
        "data=fake",
        f"data.num_samples={args.samples}",
        f"data.batch_size={args.batch}",
        f"compile={args.compile}",
        f"compile.cache_dir={args.cache}",
        "logger=none",
    ]
    with initialize_config_dir(config_dir=conf_dir(), **VERSION_BASE):
        conf = validate(compose(config_name="train", overrides=overrides))
    root = configure_cache(conf.compile)
    threads.apply(conf.trainer.num_threads, 0)
    if args.watcher_child == "hook":
        entries.start_watching(root or args.cache)
    torch.manual_seed(0)
    channels, size = input_spec(conf.model)
    data = build_data(conf.data, channels=channels, size=size, seed=0)
    in_ch, height, _ = data.sample_shape
    model = build_model(conf.model, num_classes=data.num_classes, in_channels=in_ch,
                        image_size=height)  # fmt: skip
    optimizer = build_optimizer(conf.optimizer, model)
    if not conf.compile.disable:
        model = torch.compile(model, mode=conf.compile.mode, backend=conf.compile.backend)
    model.train()

    def batches():
        epoch = 0
        while True:
            if hasattr(data, "set_epoch"):
                data.set_epoch(epoch)
            yield from data.train
            epoch += 1

    feed = batches()

    def step() -> None:
        x, y = next(feed)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # compile (from the cache after the first process) and warm up
        step()
    times = []
    cpu0 = time.process_time()
    for _ in range(args.watcher_steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu0
    # The hook's cost per audited event: an event it ignores (`builtins.id`, the one a step
    # raises) and an `open` of a file under the cache dir, which it records.
    path = str(Path(root or args.cache) / "inductor" / ("x" * 40) / "y.py")
    n = 100_000
    start = time.perf_counter()
    for _ in range(n):
        id(path)
    other_us = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        sys.audit("open", path, "r", 0)
    open_us = (time.perf_counter() - start) / n * 1e6
    counts: dict[str, int] = {}
    sys.addaudithook(lambda event, _args: counts.__setitem__(event, counts.get(event, 0) + 1))
    counted = min(20, args.watcher_steps)
    for _ in range(counted):
        step()
    print(
        "WATCHER "
        + json.dumps(
            {
                "variant": args.watcher_child,
                "step_ms": statistics.median(times) * 1e3,
                "cpu_ms_per_step": cpu / len(times) * 1e3,
                "id_call_us": other_us,
                "audit_open_us": open_us,
                "events_per_step": sum(counts.values()) / counted,
                "events": dict(sorted(counts.items(), key=lambda kv: -kv[1])[:8]),
                "entries_watched": len(entries.stop_watching()),
            }
        ),
        flush=True,
    )


def watcher_pairs(args: argparse.Namespace, env: dict[str, str]) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"none": [], "hook": []}
    for i in range(args.watcher_rounds):
        order = ["none", "hook"] if i % 2 == 0 else ["hook", "none"]
        for variant in order:
            print(f"watcher: round {i + 1}, {variant} ...", flush=True)
            argv = [sys.executable, "-m", "benchmarks.sweep_mechanisms"]
            argv += ["--watcher-child", variant, "--cache", env["TRAINER_CACHE_DIR"]]
            argv += ["--width", str(args.width), "--samples", str(args.samples)]
            argv += ["--batch", str(args.batch), "--compile", args.compile]
            argv += ["--watcher-steps", str(args.watcher_steps)]
            proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
            found = [ln for ln in proc.stdout.splitlines() if ln.startswith("WATCHER ")]
            if proc.returncode != 0 or not found:
                raise SystemExit(
                    f"watcher child failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
                )
            results[variant].append(json.loads(found[-1][len("WATCHER ") :]))
    return results


def folder_size(root: Path) -> dict[str, int]:
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


# ---------------------------------------------------------------- report


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}"
    return "-" if v is None else str(v)


def _table(rows: list[dict], head: list[str] | None = None) -> list[str]:
    return md_table.table(rows, head, _cell)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def report(args: argparse.Namespace, doc: dict) -> str:
    m, load = doc["machine"], doc["load"]
    busy = max(v[0] for v in [load["start"], load["end"], *load["phases"].values()]) > 2
    out = [
        "# What each home-made sweep mechanism buys",
        "",
        f"{m['cpu']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}. Load average "
        f"(1/5/15 min) at start {'/'.join(f'{v:.2f}' for v in load['start'])}, at end "
        f"{'/'.join(f'{v:.2f}' for v in load['end'])} (1 min, between the parts: "
        + ", ".join(f"{k} {v[0]:.2f}" for k, v in load["phases"].items() if k != "start")
        + ").",
    ]
    if busy:
        out.append(
            "**Other processes shared the CPUs** (a 1-minute load above 2, where this benchmark "
            "runs one process at a time on both CPUs): wall-clock figures include their "
            "contention; the CPU seconds, read per process, move less."
        )
    out += [
        "",
        "The realistic sweep, typed as a user types it: `python -m trainer -m "
        + " ".join(trial_overrides(args, args.trials, args.width, None))
        + "` (one agent, the default on a machine without GPUs).",
        "",
        SECTIONS[0],
        "",
        "The sweep above with trials forked from the agent's trial template (default) and with "
        f"`{ENV_SWITCH}=0` (each trial a new process), in that order, in one cache dir that a "
        "`compile.warm_only=true` run of the workload filled first (every trial hits it: "
        "cache_misses 0). load: the 1-minute load average at the sweep's start → end. "
        "handout_to_loop_s: the agent hands the "
        "run out → the trainer's training loop starts (compile excluded: it is paid in the "
        "first step). start_cpu_s: CPU seconds of the trial's process until then. "
        "template_cpu_s: the template's own (its imports), once per agent.",
        "",
    ]
    ts = doc["template"]["summary"]
    modes = [k for k in ts if k != "saving"]
    out += _table([{"mode": k, **ts[k]} for k in modes])
    out += ["", *_table([{"mode": k, **r} for k in modes for r in doc["template"]["runs"][k]["rows"]],
                        ["mode", "trial", "state", "handout_to_loop_s", "start_cpu_s", "trial_s",
                         "trial_cpu_s", "compile_s", "cache_misses"])]  # fmt: skip
    if "saving" in ts:
        s = ts["saving"]
        median_share = s["share of this sweep's median trial"]
        cpu_share = s["share of this sweep's median trial cpu"]
        out += [
            "",
            f"Saving per trial start: **{_cell(s['per trial s'])} s** wall "
            f"(**{_pct(s['share of a one-minute trial'])} of a one-minute trial**, "
            f"{_pct(median_share)} of this sweep's median trial) and "
            f"**{_cell(s['per trial cpu s'])} CPU-s** ({_pct(cpu_share)} of its median "
            "trial's CPU); the template's imports cost "
            f"{_cell(s['template cpu s per trial'])} CPU-s per trial of this sweep. Whole sweep: "
            f"{_cell(s['sweep wall s'])} s wall, {_cell(s['sweep cpu s'])} CPU-s saved (the "
            "whole sweep's figures move with the other load, which differs between the two "
            "sweeps: see the load column; the per-trial CPU seconds move least).",
        ]
    ws, bundle = doc["watcher"]["summary"], doc["watcher"]["bundle"]
    out += [
        "",
        SECTIONS[1],
        "",
        f"Steady training of the sweep's workload ({args.watcher_steps} timed steps after 3 "
        "warm-up steps, batch "
        f"{args.batch}) in fresh processes, alternating: `hook` watches the cache dir with the "
        "watcher's audit hook (as every compiled run does), `none` has no hook. "
        "id_call_us: one `id()` call, which raises the audit event `builtins.id` (the events a "
        "step raises are of this kind: the hook ignores them); audit_open_us: one `sys.audit` "
        "of an `open` under the cache dir, which the hook records. events_per_step: audited "
        "events a step raises.",
        "",
        *_table([{"variant": k, **ws[k]} for k in ("none", "hook")]),
        "",
        f"Hook cost per step: **{_cell(ws['hook cost ms per step'])} ms** wall, "
        f"{_cell(ws['hook cost cpu ms per step'])} CPU-ms ({_pct(ws['share of step'])} of a "
        "step; the rounds' spread shows the noise). Per event, the hook costs "
        f"{_cell(ws['hook us per ignored event'])} µs on an event it ignores and "
        f"{_cell(ws['hook us per recorded open'])} µs on one it records: "
        f"{_cell(ws['hook ms per step from events'])} ms per step from the events a step "
        "raises.",
        "",
        "The sweeps' bundles (their `compile_cache/`) against the whole cache dir after both "
        "sweeps (it also holds the standby commands' workload), and what a before/after diff "
        "of the cache dir found around each sweep:",
        "",
        *_table(bundle),
        "",
    ]
    return "\n".join(out)


def watcher_summary(results: dict[str, list[dict]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for variant, runs in results.items():
        summary[variant] = {
            "step_ms": _median([r["step_ms"] for r in runs]),
            "cpu_ms_per_step": _median([r["cpu_ms_per_step"] for r in runs]),
            "id_call_us": _median([r["id_call_us"] for r in runs]),
            "audit_open_us": _median([r["audit_open_us"] for r in runs]),
            "events_per_step": _median([r["events_per_step"] for r in runs]),
            "per round step_ms": ", ".join(f"{r['step_ms']:.1f}" for r in runs),
        }
    n, h = summary["none"], summary["hook"]
    summary["hook cost ms per step"] = _diff(h["step_ms"], n["step_ms"])
    summary["hook cost cpu ms per step"] = _diff(h["cpu_ms_per_step"], n["cpu_ms_per_step"])
    summary["share of step"] = _ratio(summary["hook cost ms per step"], n["step_ms"])
    ignored = _diff(h["id_call_us"], n["id_call_us"])
    summary["hook ms per step from events"] = (
        None
        if ignored is None or h["events_per_step"] is None
        else ignored * h["events_per_step"] / 1e3
    )
    summary["hook us per ignored event"] = _diff(h["id_call_us"], n["id_call_us"])
    summary["hook us per recorded open"] = _diff(h["audit_open_us"], n["audit_open_us"])
    return summary


def bundle_rows(runs: dict, cache: Path) -> list[dict]:
    whole = folder_size(cache)
    carried = cache_files(cache)
    rows = [
        {"what": "whole cache dir", "files": whole["files"], "size": _mb(whole["bytes"])},
        {
            "what": "cache dir, entries a bundle could carry",
            "files": len(carried),
            "size": _mb(sum(carried.values())),
        },  # fmt: skip
    ]
    for mode, run in runs.items():
        rows.append({"what": f"{mode} sweep's bundle (watcher)", "files": run["bundle"]["files"],
                     "size": _mb(run["bundle"]["bytes"])})  # fmt: skip
        rows.append({"what": f"{mode} sweep: before/after diff of the cache dir",
                     "files": run["cache_diff"]["files"],
                     "size": _mb(run["cache_diff"]["bytes"])})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.watcher_child:
        watcher_child(args)
        return {}
    load_start = os.getloadavg()
    started = time.time()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = {
            **os.environ,
            "TRAINER_CACHE_DIR": str(tmp / "cache"),
            "TRAINER_OUTPUT_DIR": str(tmp / "outputs"),
        }
        env.pop("TRAINER_CACHE_BUNDLE", None)  # each sweep's own bundle
        env.pop(ENV_SWITCH, None)
        phases = {"start": load_start}
        template = template_vs_process(args, tmp, env)
        phases["after template"] = os.getloadavg()
        watcher = watcher_pairs(args, env)
        bundle = bundle_rows(template, Path(env["TRAINER_CACHE_DIR"]))
    doc = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "load": {
            "start": list(load_start),
            "end": list(os.getloadavg()),
            "phases": {k: list(v) for k, v in phases.items()},
        },
        "seconds": time.time() - started,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "template": {"runs": template, "summary": template_summary(template)},
        "watcher": {"runs": watcher, "summary": watcher_summary(watcher), "bundle": bundle},
    }
    text = report(args, doc) + f"\nWhole benchmark: {doc['seconds'] / 60:.1f} min.\n"
    print(text)
    folder = destination.folder(args)
    (folder / "sweep_mechanisms.md").write_text(text)
    (folder / "sweep_mechanisms.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {folder / 'sweep_mechanisms.md'} and .json")
    return doc


if __name__ == "__main__":
    main()
