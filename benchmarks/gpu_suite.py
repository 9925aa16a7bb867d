"""Everything a GPU machine should measure, in one command of under 8 minutes on one
H100/H200-class GPU: the `gpu` tests; resnet50 and resnet18 training at 224×224 in bf16, eager
against compile modes default, max-autotune-no-cudagraphs and reduce-overhead; the trainer
against a bare loop; resnet18 on 32×32 device-resident data with data.augment=standard, in
memory against streamed; a 4-trial sweep with 2 trials per GPU against one at a time. Each step runs in its own process with a time limit (a step that
runs over is reported as such, the rest still run). Writes `gpu_<device name>.md`.

    python -m benchmarks.gpu_suite             # on a GPU machine (--publish: benchmarks/results/)
    python -m benchmarks.gpu_suite --dry-run   # print the steps, run nothing (any machine)

Targets (for the benchmark, not for tests): compiled / eager >= 1.43 for resnet50 bf16
training; trainer / bare >= 0.98; 0 recompiles and 0 CUDA-graph skips.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import destination

ROOT = Path(__file__).resolve().parents[1]  # every step runs from the repository root
SPEEDUP_TARGET, OVERHEAD_TARGET = 1.43, 0.98
R50_BF16 = ["--models", "resnet50", "--image-size", "224", "--batch", "128"]
R18_BF16 = ["--models", "resnet18", "--image-size", "224", "--batch", "256"]
MODES = ["--precision", "bf16-mixed", "--device", "cuda", "--rounds", "1", "--steps", "15"]


@dataclass
class Step:
    name: str
    module: str  # python -m <module>; pytest runs the gpu-marked tests
    args: list[str]
    timeout_s: int
    status: str = "not run"
    seconds: float = 0.0
    output: str = ""


def steps() -> list[Step]:
    """The suite, in order; the time limits add up to 480 s."""
    return [
        Step("gpu tests", "pytest", ["-m", "gpu", "-q", "-p", "no:cacheprovider"], 130),
        Step("resnet50 default, reduce-overhead", "benchmarks.compile_modes",
             [*R50_BF16, *MODES, "--modes", "default,reduce-overhead"], 85),
        Step("resnet50 max-autotune-no-cudagraphs", "benchmarks.compile_modes",
             [*R50_BF16, *MODES, "--modes", "max-autotune-no-cudagraphs"], 75),
        Step("resnet18 three modes", "benchmarks.compile_modes",
             [*R18_BF16, *MODES, "--modes",
              "default,max-autotune-no-cudagraphs,reduce-overhead"], 55),
        Step("trainer vs bare loop", "benchmarks.overhead",
             ["--device", "cuda", "--model", "resnet18", "--batch", "256", "--steps", "40",
              "--rounds", "2", "--precision", "bf16-mixed"], 45),
        Step("input pipeline", "benchmarks.input_pipeline",
             ["--device", "cuda", "--format", "fashion_mnist", "--model", "resnet18",
              "--augment", "standard", "--precision", "bf16-mixed", "--batch", "512",
              "--train", "60000", "--test", "10000", "--rounds", "1"], 35),
        Step("4-trial sweep, 2 trials per GPU", "benchmarks.sweep_devices",
             ["--devices", "auto", "--trials", "4", "--trials-per-device", "2"], 55),
    ]  # fmt: skip


def command(step: Step, out: Path | None) -> list[str]:
    where = [] if step.module == "pytest" or out is None else ["--out", str(out)]
    return [sys.executable, "-m", step.module, *step.args, *where]


def run_step(step: Step, out: Path) -> None:
    """Run one step in its own process group, within its time limit; keep its output. A step
    past its limit is killed with every process it started (a test's trainer, DDP ranks), so
    nothing of it runs on during the next step's measurements."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command(step, out), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        step.output, _ = proc.communicate(timeout=step.timeout_s)
        step.status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        step.output, _ = proc.communicate()
        step.status = f"over its {step.timeout_s} s limit"
    step.seconds = time.perf_counter() - start


def device_slug(name: str) -> str:
    """`NVIDIA H200` -> `nvidia_h200` (the result file's name)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _compile_rows(folder: Path) -> dict:
    path = folder / "compile_modes_cuda.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def verdicts(results: dict[str, Path]) -> list[str]:
    """The targets, checked on what the steps wrote."""
    lines = []
    ratios = {  # each compiled variant against the eager run of its own process
        name: max(v["samples_per_s"]) / max(rows["eager"]["samples_per_s"])
        for key in ("r50a", "r50b")
        for rows in [_compile_rows(results[key]).get("resnet50", {})]
        if "eager" in rows
        for name, v in rows.items()
        if name != "eager"
    }
    if ratios:
        best = max(ratios, key=ratios.__getitem__)
        ok = "meets" if ratios[best] >= SPEEDUP_TARGET else "misses"
        lines.append(
            f"resnet50 bf16 compiled ({best}) / eager: {ratios[best]:.2f}× ({ok} {SPEEDUP_TARGET}×)"
        )
    variants = [v for key in ("r50a", "r50b", "r18") for m in _compile_rows(results[key]).values()
                for name, v in m.items() if name != "eager"]  # fmt: skip
    if variants:
        recompiles = sum(v["recompiles"] for v in variants)
        skips = sum(v.get("cudagraph_skips", 0) for v in variants)
        lines.append(
            f"compiled variants: {recompiles} recompiles, {skips} CUDA-graph skips (target 0)"
        )
    overhead = results["overhead"] / "overhead_cuda.md"
    match = re.search(r"\*\*([0-9.]+)\*\*", overhead.read_text()) if overhead.is_file() else None
    if match:
        ok = "meets" if float(match.group(1)) >= OVERHEAD_TARGET else "misses"
        lines.append(f"trainer / bare loop: {match.group(1)} ({ok} {OVERHEAD_TARGET})")
    sweep = results["sweep"] / "sweep_devices.md"
    match = re.search(r"\*\*([0-9.]+)×\*\*", sweep.read_text()) if sweep.is_file() else None
    if match:
        lines.append(f"4 trials, 2 per GPU, against one at a time: {match.group(1)}× faster")
    return lines


def report(name: str, suite: list[Step], folders: list[Path], torch_version: str) -> str:
    total = sum(s.seconds for s in suite)
    lines = [f"# GPU suite: {name}", "", f"torch {torch_version}; {total:.0f} s in all.", "",
             "| step | status | seconds |", "| --- | --- | ---: |"]  # fmt: skip
    lines += [f"| {s.name} | {s.status} | {s.seconds:.0f} |" for s in suite]
    keys = ["r50a", "r50b", "r18", "overhead", "pipeline", "sweep"]
    lines += [
        "",
        "## Targets",
        "",
        *(f"- {v}" for v in verdicts(dict(zip(keys, folders[1:], strict=True)))),
    ]
    tests = [
        line for line in suite[0].output.splitlines() if re.search(r"passed|failed|error", line)
    ]
    lines += ["", "## `pytest -m gpu`", "", f"`{tests[-1] if tests else suite[0].status}`"]
    for step, folder in zip(suite[1:], folders[1:], strict=True):
        lines += ["", f"## {step.name}", ""]
        tables = sorted(folder.glob("*.md"))
        lines += [t.read_text().strip() for t in tables] or [f"({step.status})", "", "```",
                                                              step.output[-1500:], "```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every step's time limit (a slower GPU)",
    )
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    suite = steps()
    for step in suite:
        step.timeout_s = round(step.timeout_s * args.time_scale)
    if args.dry_run:
        print(f"python -m benchmarks.gpu_suite: {len(suite)} steps, at most "
              f"{sum(s.timeout_s for s in suite)} s, writing gpu_<device name>.md")  # fmt: skip
        for i, s in enumerate(suite, 1):
            print(f"{i}. {s.name} (limit {s.timeout_s} s): python {' '.join(command(s, None)[1:])}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print(
            "error: the GPU suite needs a CUDA device; --dry-run prints its steps.", file=sys.stderr
        )
        return 2
    name = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory() as tmp:
        folders = [Path(tmp) / str(i) for i in range(len(suite))]
        for step, folder in zip(suite, folders, strict=True):
            folder.mkdir()
            print(f"{step.name} ...", flush=True)
            run_step(step, folder)
            print(f"{step.name}: {step.status} in {step.seconds:.0f} s", flush=True)
        text = report(name, suite, folders, torch.__version__)
    path = destination.folder(args) / f"gpu_{device_slug(name)}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
