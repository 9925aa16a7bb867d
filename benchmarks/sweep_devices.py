"""Trials packed on GPUs against trials one after another: the same local sweep (a grid of
`--trials` seeds) run with `hydra.sweeper.devices` and `trials_per_device=K` (K agents per
device), then with one trial at a time on the same devices; the wall time of each and the
speed-up. Writes sweep_devices.md under outputs/benchmarks/ (`--out DIR`, or `--publish`).

    python -m benchmarks.sweep_devices [--devices auto] [--trials 4] [--trials-per-device 2]

On a machine without GPUs, give indices (`--devices 0`): trials get CUDA_VISIBLE_DEVICES and
train on the CPU, which checks the mechanics, not the speed-up.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import destination
from trainer.sweep.agents.gpu_slots import DevicePlan, resolve
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions


def _config(args: argparse.Namespace) -> dict:
    return {
        "method": "grid",
        "parameters": {"trainer.seed": {"values": list(range(args.trials))}},
        "command": [
            "${env}",
            "${interpreter}",
            "-m",
            "trainer",
            "${args_no_hyphens}",
            "compile=off",
            "logger=none",
            f"model={args.model}",
            "data=fake",
            f"data.num_samples={args.samples}",
            f"trainer.precision={args.precision}",
            "trainer.max_epochs=1",
            f"trainer.max_steps={args.steps}",
        ],
    }


def timed_sweep(args: argparse.Namespace, plan: DevicePlan, agents: int) -> tuple[float, list]:
    """Wall seconds of one sweep in fresh folders, and its runs' (state, devices)."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        res = run_sweep(_config(args), SweepOptions(agents=agents), root=Path(tmp), devices=plan)
        wall = time.perf_counter() - started
    return wall, [(r["state"], ",".join(r["devices"])) for r in res["runs"]]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", default="auto", help="auto, or indices: 0,1")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--trials-per-device", type=int, default=2)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps", type=int, default=60, help="training steps per trial")
    parser.add_argument("--samples", type=int, default=2048, help="fake training images")
    parser.add_argument("--precision", default="bf16-mixed" if torch.cuda.is_available() else "32")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    option = args.devices if args.devices == "auto" else [int(d) for d in args.devices.split(",")]
    devices = tuple(resolve(option))
    if not devices:
        parser.error("no GPU here: give indices with --devices 0 (trials then train on the CPU)")
    packed = DevicePlan(devices, trials_per_device=args.trials_per_device)
    packed_s, packed_runs = timed_sweep(args, packed, packed.slots)
    serial_s, serial_runs = timed_sweep(args, DevicePlan(devices[:1]), 1)
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.machine()
    text = "\n".join(
        [
            "# Trials packed on GPUs against one after another",
            "",
            f"{name}, torch {torch.__version__}; {args.trials} trials of {args.model} "
            f"({args.samples} fake 32×32 images, {args.steps} steps, {args.precision}, compile=off), "
            f"devices {','.join(devices)}.",
            "",
            "| run | agents | wall s | trials (state, devices) |",
            "| --- | ---: | ---: | --- |",
            f"| trials_per_device={args.trials_per_device} | {packed.slots} | {packed_s:.1f} | "
            f"{packed_runs} |",
            f"| one at a time | 1 | {serial_s:.1f} | {serial_runs} |",
            "",
            f"Speed-up of packing: **{serial_s / packed_s:.2f}×**.",
        ]
    )
    print(text)
    path = destination.folder(args) / "sweep_devices.md"
    path.write_text(text + "\n")
    print(f"wrote {path}")
    return {"packed_s": packed_s, "serial_s": serial_s, "runs": packed_runs + serial_runs}


if __name__ == "__main__":
    main()
