"""One search, two sweepers: Hydra's Optuna sweeper (trials in-process, one at a time) and ours
(`hydra/sweeper=wandb`, one agent and one agent per core), alternating, whole-command wall
time and best metric, eager and compiled. Then 1-second trials (a fixed `trainer.max_steps`,
compile off): ours with 1 and 2 agents, the Optuna sweeper and Ray Tune (a function trainable,
2 concurrent), and what each adds per trial per slot outside the trial's own training:
(first hand-out to last trial's end) x concurrent trials / trials - the trials' mean
`perf.wall_s`. Needs Hydra's Optuna sweeper, installed with
`pip install --no-deps "hydra-optuna-sweeper==1.3.0"` (it pins optuna<3; it runs with the
project's optuna 5), and Ray Tune in a venv beside the project's (`--ray-venv`, made with
`ray[tune]` on first use; its interpreter sees the project's packages through a .pth file).

    python -m benchmarks.sweep_peers --publish           # the full run: writes results/
    python -m benchmarks.sweep_peers --trials 2 --epochs 1 --rounds 1 --compile off \
        --short-trials 4 --sweepers ours                 # a check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import destination, md_table
from trainer.sweep.agents import cpu_share
from trainer.sweep.store.database import SweepStore

ROOT = Path(__file__).resolve().parents[1]
# the search of the issue, and its 1-second trials; fewer is a check
FULL = {"trials": 8, "epochs": 3, "rounds": 2, "short_trials": 40}
SEARCH = "optimizer.lr=tag(log, interval(0.001, 0.5))"
COMMON = ["model=small_cnn", "data=digits", "logger=none", "trainer.seed=0"]
SWEEPERS = ["optuna", "ours", "ray"]
SHORT_STEPS = 120  # training steps of a 1-second trial (small_cnn on digits, compile off, 2 CPUs)
# A 1-second trial's fixed overrides: max_steps ends it (max_epochs never does).
SHORT = [*COMMON, "compile=off", "trainer.max_epochs=1000"]
RAY = "ray[tune]==2.60.0"  # Ray Tune as measured; installed into --ray-venv


@dataclass
class Variant:
    name: str  # optuna | ours-1 | ours-N
    compile: str  # compile group: off | default
    agents: int  # concurrent trials (optuna: 1, in-process)
    walls: list[float] = field(default_factory=list)  # whole-command seconds, one per round
    best: list[float] = field(default_factory=list)  # best val/acc of the search, per round
    step_ms: list[float] = field(default_factory=list)  # every trial's steady step, every round
    threads: list[int] = field(default_factory=list)  # every trial's torch threads


def command(variant: Variant, trials: int, epochs: int) -> list[str]:
    """The whole sweep as a user types it."""
    base = [sys.executable, "-m", "trainer", "-m", SEARCH, *COMMON, f"compile={variant.compile}"]
    base.append(f"trainer.max_epochs={epochs}")
    return [*base, *sweeper_overrides(variant.name, variant.agents, trials)]


def sweeper_overrides(name: str, agents: int, trials: int) -> list[str]:
    """The sweeper's part of a sweep's command line: the Optuna sweeper's, or ours."""
    if name == "optuna":
        return [
            "hydra/sweeper=optuna",
            f"hydra.sweeper.n_trials={trials}",
            "hydra.sweeper.direction=maximize",
            "hydra.sweeper.sampler.seed=0",
        ]
    return [
        "hydra/sweeper=wandb",
        "hydra.sweeper.method=random",
        f"hydra.sweeper.run_cap={trials}",
        "hydra.sweeper.metric={name: val/acc, goal: maximize}",
        f"hydra.sweeper.agents={agents}",
    ]


def measure(variant: Variant, trials: int, epochs: int, log_dir: Path) -> None:
    """Run the variant once in fresh output and compile-cache folders; record its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "TRAINER_OUTPUT_DIR": str(Path(tmp) / "outputs"),
            "TRAINER_CACHE_DIR": str(Path(tmp) / "cache"),  # every sweep starts cold
            "WANDB_SILENT": "true",
        }
        log = log_dir / f"{variant.name}-{variant.compile}-{len(variant.walls)}.log"
        started = time.perf_counter()
        with open(log, "w") as out:
            code = subprocess.call(
                command(variant, trials, epochs), cwd=ROOT, env=env, stdout=out, stderr=out
            )
        wall = time.perf_counter() - started
        if code != 0:
            raise SystemExit(f"{variant.name} compile={variant.compile} exited {code}; see {log}")
        summaries = [
            json.loads(p.read_text()) for p in (Path(tmp) / "outputs").rglob("summary.json")
        ]
    if len(summaries) != trials:
        raise SystemExit(f"{variant.name}: {len(summaries)} trial summaries, expected {trials}")
    variant.walls.append(wall)
    variant.best.append(max(s["best"]["value"] for s in summaries))
    variant.step_ms += [s["perf"]["step_ms"] for s in summaries]
    variant.threads += [s["cpu"]["threads"] for s in summaries]


@dataclass
class Short:
    """One sweeper on 1-second trials: per round, the span from the first hand-out to the last
    trial's end, the trials' own seconds (mean perf.wall_s) and, for ours, where each trial's
    slot-seconds went (PARTS)."""

    name: str  # ours-1 | ours-2 | optuna | ray-2
    concurrent: int
    span_s: list[float] = field(default_factory=list)
    own_s: list[float] = field(default_factory=list)
    overhead_s: list[float] = field(default_factory=list)  # per trial per slot
    parts: list[dict[str, float]] = field(default_factory=list)  # ours: seconds per trial per slot


# Where a trial's slot-seconds go in our sweep, read from the store and the trial's summary.
PARTS = {
    "agent: hand-out to trial process": "claim → the trial forked (run dir, command, fork)",
    "trial: start-up": "fork → training set up (Hydra compose, run dir and .hydra/, checks, "
    "data, model)",
    "trial: own training (perf.wall_s)": "training, evaluation, checkpoints, summary",
    "trial: exit to recorded": "summary written → the agent recorded the run (summary "
    "printed, exit code told, store updated)",
    "agent: recorded to next hand-out": "the agent's loop and its next claim",
    "idle slot": "an agent's slot before its first hand-out or after its last run (start, drain)",
}


def short_command(name: str, agents: int, trials: int, steps: int) -> list[str]:
    """1-second trials as a user types the sweep (ours, the Optuna sweeper)."""
    base = [sys.executable, "-m", "trainer", "-m", SEARCH, *SHORT, f"trainer.max_steps={steps}"]
    return [*base, *sweeper_overrides(name, agents, trials)]


def our_parts(store: SweepStore, slots: int) -> tuple[float, float, dict[str, float]]:
    """(span, trials' mean own seconds, PARTS in seconds per trial per slot) of our sweep on
    `slots` agents; what no run's timestamps cover is the idle slots' (start, drain)."""
    runs = sorted(store.runs(), key=lambda r: r.created_at)
    first, last = runs[0].created_at, max(r.ended_at for r in runs)
    sums = dict.fromkeys(PARTS, 0.0)
    for r in runs:
        perf = r.summary["perf"]
        fit_end = perf["loop_started_at"] + perf["wall_s"]
        sums["agent: hand-out to trial process"] += r.started_at - r.created_at
        sums["trial: start-up"] += perf["loop_started_at"] - r.started_at
        sums["trial: own training (perf.wall_s)"] += perf["wall_s"]
        sums["trial: exit to recorded"] += r.ended_at - fit_end
    for pid in {r.agent_pid for r in runs}:
        mine = [r for r in runs if r.agent_pid == pid]
        sums["agent: recorded to next hand-out"] += sum(
            b.created_at - a.ended_at for a, b in zip(mine, mine[1:], strict=False)
        )
    sums["idle slot"] = (last - first) * slots - sum(sums.values())
    own = sums["trial: own training (perf.wall_s)"] / len(runs)
    return last - first, own, {k: v / len(runs) for k, v in sums.items()}


def _hydra_started(run_dir: Path) -> float:
    """When Hydra's launcher started a job: its .hydra/ files' time."""
    return (run_dir / ".hydra" / "overrides.yaml").stat().st_mtime


def measure_short(
    variant: Short, trials: int, steps: int, ray_python: Path | None, log_dir: Path
) -> None:
    """One sweep of 1-second trials in fresh folders; record its span, own seconds, overhead."""
    ray = variant.name.startswith("ray")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "outputs"
        env = {
            **os.environ,
            "TRAINER_OUTPUT_DIR": str(out),
            "TRAINER_CACHE_DIR": str(Path(tmp) / "cache"),
            "WANDB_SILENT": "true",
        }
        if ray:
            argv = [
                str(ray_python), "-m", "benchmarks.ray_tune_trials", "--trials", str(trials),
                "--concurrent", str(variant.concurrent), "--out", str(out), *SHORT,
                f"trainer.max_steps={steps}", f"trainer.num_threads={_threads(variant.concurrent)}",
            ]  # fmt: skip
        else:
            argv = short_command(variant.name, variant.concurrent, trials, steps)
        log = log_dir / f"short-{variant.name}-{len(variant.span_s)}.log"
        with open(log, "w") as handle:  # Ray's side prints its trials' times on stdout
            done = subprocess.run(
                argv, cwd=ROOT, env=env, stdout=subprocess.PIPE if ray else handle,
                stderr=handle if ray else subprocess.STDOUT, text=True,
            )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(
                f"{variant.name} (1-second trials) exited {done.returncode}; see {log}"
            )
        summaries = {p.parent: json.loads(p.read_text()) for p in out.rglob("summary.json")}
        if len(summaries) != trials:
            raise SystemExit(f"{variant.name}: {len(summaries)} trial summaries, expected {trials}")
        own = statistics.mean(s["perf"]["wall_s"] for s in summaries.values())
        if variant.name.startswith("ours"):
            (db,) = out.rglob("sweep.db")
            span, own, parts = our_parts(SweepStore(db), variant.concurrent)
            variant.parts.append(parts)
        elif ray:  # its trainable's entry (the hand-out) to its last return
            rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            span = max(r["ended"] for r in rows) - min(r["started"] for r in rows)
        else:  # the Optuna sweeper: its first job's start to its last summary
            first = min(_hydra_started(d) for d in summaries)
            span = max((d / "summary.json").stat().st_mtime for d in summaries) - first
    variant.span_s.append(span)
    variant.own_s.append(own)
    variant.overhead_s.append(span * variant.concurrent / trials - own)


def trial_phases(steps: int, trials: int = 5) -> dict[str, float]:
    """benchmarks.trial_phases: our trial's start-up and exit, phase by phase (median s)."""
    argv = [sys.executable, "-m", "benchmarks.trial_phases", "--trials", str(trials)]
    argv += ["--steps", str(steps), *SHORT, f"trainer.num_threads={_threads(1)}"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TRAINER_CACHE_DIR": str(Path(tmp) / "cache")}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.trial_phases exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _threads(concurrent: int) -> int:
    """Torch threads of a trial among `concurrent` (ours: its CPU share, cpu_share)."""
    return max(1, cpu_share.process_limits().count // concurrent)


def ray_interpreter(venv: Path) -> Path:
    """The Python of a venv with Ray Tune beside the project's packages: made on first use (a
    venv of this Python whose .pth adds this venv's site-packages, then `pip install` of RAY,
    which adds only what this venv lacks)."""
    python = venv / "bin" / "python"
    if (
        python.is_file()
        and subprocess.call([python, "-c", "import ray.tune"], stderr=subprocess.DEVNULL) == 0
    ):
        return python
    print(f"installing {RAY} into {venv} (once)", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.check_call([base, "-m", "venv", str(venv)])
    site = subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(site) / "zz_project_venv.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    subprocess.check_call([python, "-m", "pip", "install", "--quiet", RAY])
    return python


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(variants: list[Variant], args: argparse.Namespace, cores: int) -> str:
    lines = [
        "# Sweeps side by side: Hydra's Optuna sweeper and ours",
        "",
        f"{platform.machine()}, {cores} CPUs this process may use, Python "
        f"{platform.python_version()}; {args.trials} trials of small_cnn on digits, "
        f"{args.epochs} epochs, `{SEARCH}`, `logger=none`; medians of {args.rounds} alternating "
        "rounds, each sweep in fresh output and compile-cache folders.",
        "",
        "| sweeper | compile | concurrent trials | wall s | best val/acc | trial step ms "
        "| threads per trial |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        threads = sorted(set(v.threads))
        lines.append(
            f"| {v.name} | {v.compile} | {v.agents} | {_median(v.walls):.1f} | "
            f"{_median(v.best):.4f} | {_median(v.step_ms):.2f} | "
            f"{', '.join(map(str, threads))} |"
        )
    lines += ["", "Targets:", ""]
    for mode in args.compile:
        by = {v.name: v for v in variants if v.compile == mode}
        one, many, optuna = by.get("ours-1"), by.get(f"ours-{args.agents}"), by.get("optuna")
        if one and optuna:
            ratio = _median(one.walls) / _median(optuna.walls)
            lines.append(
                f"- compile={mode}: ours with 1 agent / Optuna sweeper wall = {ratio:.2f} "
                "(target <= 1.00)"
            )
        if one and many and many is not one:
            speedup = _median(one.walls) / _median(many.walls)
            scale = _median(many.step_ms) / (_median(one.step_ms) * args.agents / cores)
            lines.append(
                f"- compile={mode}: {args.agents} agents are {speedup:.2f}x faster than 1 "
                f"(target >= 1.60); trial step with {args.agents} concurrent / (alone x "
                f"{args.agents}/{cores}) = {scale:.2f} (target <= 1.10)"
            )
    return "\n".join(lines) + "\n"


TARGET_S = 0.15  # overhead per trial per slot: Ray Tune's release test (issue 41)


def report_short(
    shorts: list[Short], args: argparse.Namespace, phases: list[dict[str, float]]
) -> list[str]:
    """The 1-second trials' section: each sweeper's overhead, and where ours goes."""
    lines = [
        "",
        "## 1-second trials",
        "",
        f"{args.short_trials} trials of `{SEARCH}` with `trainer.max_steps={args.short_steps}` "
        f"(small_cnn on digits, compile off, `logger=none`); medians of {args.rounds} "
        "alternating rounds. overhead = span x concurrent trials / trials - the trials' mean "
        "own seconds (`perf.wall_s` of their summary.json: training, evaluation, checkpoints). "
        "span: ours, the store's first hand-out to the last run's end (recorded); the Optuna "
        "sweeper, its first job's `.hydra/` files (after its first ask and compose) to the last "
        "summary.json; Ray Tune, its first trainable call to its last return (each trial "
        "composes with Hydra's compose API and calls `run(cfg)` in Ray's reused worker "
        f"processes, {_threads(2)} torch thread(s) each as ours with 2 agents).",
        "",
        *md_table.table(
            [
                {
                    "sweeper": v.name,
                    "concurrent trials": v.concurrent,
                    "span s": _median(v.span_s),
                    "trial's own s": _median(v.own_s),
                    "overhead s per trial per slot": f"{_median(v.overhead_s):.3f}",
                }
                for v in shorts
            ]
        ),
    ]
    ours = [v for v in shorts if v.name.startswith("ours") and v.parts]
    if ours:
        lines += [
            "",
            f"Target: ours <= {TARGET_S:.2f} s per trial per slot (Ray Tune's release test, "
            "with its trials in reused worker processes; ours stay processes of their own): "
            + "; ".join(
                f"{v.name} {_median(v.overhead_s):.3f} s "
                f"({'met' if _median(v.overhead_s) <= TARGET_S else 'not met'})"
                for v in ours
            )
            + ".",
            "",
            "Where our trials' slot-seconds go, ms per trial per slot (medians of the rounds; "
            "the rows add up to span x agents / trials):",
            "",
            *md_table.table(
                [
                    {
                        "part": part,
                        "what": what,
                        **{
                            f"{v.name} ms": f"{1000 * _median([p[part] for p in v.parts]):.0f}"
                            for v in ours
                        },
                    }
                    for part, what in PARTS.items()
                ]
            ),
        ]
    if phases:
        lines += [
            "",
            "Our trial's start-up and exit, phase by phase (benchmarks.trial_phases: trials "
            "forked one at a time from a process with the template's imports and what it "
            "composed, and run as the template runs them, named steps timed; ms, median of 5 "
            "trials a round, medians of the rounds; in a sweep a trial's phases share the 2 "
            "CPUs with its agent and template, and another trial's with 2 agents, so they take "
            "a little longer there):",
            "",
            *md_table.table(
                [
                    {"phase": name, "ms": f"{1000 * _median([p[name] for p in phases]):.0f}"}
                    for name in phases[0]
                ]
            ),
        ]
    return lines


def main(argv: list[str] | None = None) -> tuple[list[Variant], list[Short]]:
    cores = cpu_share.process_limits().count
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trials", type=int, default=FULL["trials"], help="trials per sweep")
    parser.add_argument("--epochs", type=int, default=FULL["epochs"], help="epochs per trial")
    parser.add_argument("--rounds", type=int, default=FULL["rounds"], help="alternating rounds")
    parser.add_argument(
        "--compile", type=lambda s: s.split(","), default=["off", "default"], help="off,default"
    )
    parser.add_argument("--agents", type=int, default=cores, help="agents of the parallel run")
    parser.add_argument(
        "--sweepers",
        type=lambda s: s.split(","),
        default=SWEEPERS,
        help="optuna,ours,ray (ours alone needs neither Hydra's Optuna sweeper nor Ray)",
    )
    parser.add_argument(
        "--short-trials",
        type=int,
        default=FULL["short_trials"],
        help="trials of the 1-second part (0: skip it)",
    )
    parser.add_argument(
        "--short-steps", type=int, default=SHORT_STEPS, help="trainer.max_steps of a 1-second trial"
    )
    parser.add_argument(
        "--ray-venv",
        type=Path,
        default=ROOT / "outputs" / "venvs" / "ray-tune",
        help=f"venv of Ray Tune's side ({RAY}, made on first use)",
    )
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    if (
        "optuna" in args.sweepers
        and importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None
    ):
        raise SystemExit(
            "error: Hydra's Optuna sweeper is not installed; pip install --no-deps "
            "hydra-optuna-sweeper==1.3.0 (or pass --sweepers ours,ray)"
        )
    full = all(getattr(args, k) >= v for k, v in FULL.items()) and set(args.sweepers) == set(
        SWEEPERS
    )
    if args.publish and not full:
        raise SystemExit(
            "error: --publish replaces benchmarks/results/sweep_peers.* and needs the full run "
            f"({', '.join(f'--{k} >= {v}' for k, v in FULL.items())}, every sweeper); "
            "drop --publish (a reduced run writes to outputs/benchmarks/) or pass --out DIR"
        )
    variants = []
    for mode in args.compile:
        if "optuna" in args.sweepers:
            variants.append(Variant("optuna", mode, 1))
        if "ours" in args.sweepers:
            variants.append(Variant("ours-1", mode, 1))
            if args.agents > 1:
                variants.append(Variant(f"ours-{args.agents}", mode, args.agents))
    shorts = []
    if args.short_trials > 0:
        if "ours" in args.sweepers:
            shorts.append(Short("ours-1", 1))
            if args.agents > 1:
                shorts.append(Short(f"ours-{args.agents}", args.agents))
        if "optuna" in args.sweepers:
            shorts.append(Short("optuna", 1))
        if "ray" in args.sweepers:
            shorts.append(Short(f"ray-{args.agents}", args.agents))
    ray_python = (
        ray_interpreter(args.ray_venv) if any(v.name.startswith("ray") for v in shorts) else None
    )
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            # Alternate, and reverse every other round so drift in load hits every variant.
            order = variants if round_ % 2 == 0 else variants[::-1]
            for variant in order:
                measure(variant, args.trials, args.epochs, Path(logs))
                print(
                    f"round {round_ + 1}: {variant.name} compile={variant.compile}: "
                    f"{variant.walls[-1]:.1f} s, best {variant.best[-1]:.4f}",
                    flush=True,
                )
        phases = []
        for round_ in range(args.rounds):
            if any(v.name.startswith("ours") for v in shorts):
                phases.append(trial_phases(args.short_steps))
            for short in shorts if round_ % 2 == 0 else shorts[::-1]:
                measure_short(short, args.short_trials, args.short_steps, ray_python, Path(logs))
                print(
                    f"round {round_ + 1}: {short.name}, 1-second trials: overhead "
                    f"{short.overhead_s[-1]:.3f} s per trial per slot",
                    flush=True,
                )
    text = report(variants, args, cores) + (
        "\n".join(report_short(shorts, args, phases)) + "\n" if shorts else ""
    )
    print(text)
    out = destination.folder(args)
    (out / "sweep_peers.md").write_text(text)
    (out / "sweep_peers.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if k not in ("out", "publish")},
                "cores": cores,
                "variants": [asdict(v) for v in variants],
                "one_second_trials": [asdict(v) for v in shorts],
                "trial_phases_s": phases,
            },
            indent=2,
            default=str,  # --out, --ray-venv
        )
    )
    return variants, shorts


if __name__ == "__main__":
    main()
