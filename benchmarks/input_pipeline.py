"""Input pipeline: samples/s of the device-resident path (decoded once into a uint8 tensor on
the training device, batched, normalised and augmented there) against the streamed path
(a DataLoader decoding each sample through PIL in its workers), on MNIST-format data written on
the fly in torchvision's raw layout. Two figures per path, alternating rounds: the pipeline
alone (one epoch of training batches, nothing else) and the trainer's steady samples/s.

    python -m benchmarks.input_pipeline                                  # CPU, small_cnn, MNIST
    python -m benchmarks.input_pipeline --device cuda --format fashion_mnist --model resnet18 \\
        --augment standard --precision bf16-mixed --batch 512

Writes `input_pipeline_<device>.md` under outputs/benchmarks/ (`--out DIR` elsewhere,
`--publish` replaces the published figures in benchmarks/results/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from benchmarks import destination
from benchmarks.idx_files import write_mnist_format
from benchmarks.overhead import model_overrides
from trainer.config.hydra_version import VERSION_BASE
from trainer.config.paths import conf_dir
from trainer.config.schema import DataConfig
from trainer.data.plan import plan_data
from trainer.hardware.devices import sync
from trainer.hardware.distributed import Dist
from trainer.preflight import validate
from trainer.run import build_run_data, run

PIPELINES = ("memory", "stream")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--format", default="mnist", choices=("mnist", "fashion_mnist"))
    p.add_argument("--train", type=int, default=10_000, help="training images written")
    p.add_argument("--test", type=int, default=2_000, help="validation images written")
    p.add_argument("--model", default="small_cnn", help="model name (conf/model or torchvision)")
    p.add_argument("--width", type=int, default=8, help="small_cnn: model.width (channels)")
    p.add_argument("--threads", default="auto", help="trainer.num_threads of both paths")
    p.add_argument("--augment", default="none", help="data.augment: none | standard | strong")
    p.add_argument("--batch", type=int, default=256, help="samples per training step")
    p.add_argument("--epochs", type=int, default=2, help="trainer epochs; the last one is timed")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (medians reported)")
    p.add_argument("--compile", default="off", help="compile group of the trainer runs")
    p.add_argument("--precision", default="32", help="trainer.precision")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    destination.add_arguments(p)
    return p.parse_args(argv)


def overrides(args: argparse.Namespace, root: Path, pipeline: str) -> list[str]:
    return [
        *model_overrides(args.model),
        f"data={args.format}",
        f"data.root={root}",
        f"data.pipeline={pipeline}",
        f"data.batch_size={args.batch}",
        f"data.augment={args.augment}",
        f"compile={args.compile}",
        "logger=none",
        "scheduler=none",
        f"trainer.max_epochs={args.epochs}",
        f"trainer.device={args.device}",
        f"trainer.precision={args.precision}",
        "trainer.log_every_n_steps=1000000",
        f"trainer.num_threads={args.threads}",
        *([f"model.width={args.width}"] if args.model == "small_cnn" else []),
    ]


def pipeline_samples_per_s(cfg, device: torch.device) -> float:
    """One epoch of training batches on `device` (after an untimed one that starts workers)."""
    data = build_run_data(validate(cfg), device, Dist())
    for epoch in range(2):
        data.set_epoch(epoch)
        sync(device)
        start, samples = time.perf_counter(), 0
        for x, _ in data.train:
            samples += x.shape[0]
        sync(device)
        seconds = time.perf_counter() - start
    return samples / seconds


def trainer_figures(cfg) -> tuple[float, float]:
    """(steady samples/s, seconds) of the trainer's last epoch, as it reports them."""
    with tempfile.TemporaryDirectory() as out:
        result = run(cfg, run_dir=out)
    return result["perf/samples_per_s"], result["perf/epoch_s"]


def measure(args: argparse.Namespace, root: Path) -> dict[str, dict[str, list[float]]]:
    device = torch.device(args.device)
    figures = {p: {"pipeline": [], "trainer": [], "epoch_s": []} for p in PIPELINES}
    with initialize_config_dir(config_dir=conf_dir(), **VERSION_BASE):
        cfgs = {
            p: compose(config_name="train", overrides=overrides(args, root, p)) for p in PIPELINES
        }
    for round_ in range(args.rounds):
        for pipeline in PIPELINES:
            print(f"round {round_ + 1}/{args.rounds}: {pipeline}", flush=True)
            figures[pipeline]["pipeline"].append(pipeline_samples_per_s(cfgs[pipeline], device))
            sps, epoch_s = trainer_figures(cfgs[pipeline])
            figures[pipeline]["trainer"].append(sps)
            figures[pipeline]["epoch_s"].append(epoch_s)
    return figures


def table(args: argparse.Namespace, figures: dict, workers: int) -> str:
    med = statistics.median
    width = f" (width {args.width})" if args.model == "small_cnn" else ""
    lines = [
        f"`{args.model}`{width} on MNIST-format `{args.format}` data written on the fly ({args.train:,} "
        f"training images, torchvision's raw layout), batch {args.batch}, `data.augment="
        f"{args.augment}`, compile `{args.compile}`, precision `{args.precision}`, device "
        f"`{args.device}`, `trainer.num_threads={args.threads}`, torch {torch.__version__}; medians of {args.rounds} alternating "
        f"round(s). Streamed: a DataLoader with {workers} worker(s) (`data.num_workers=auto`).",
        "",
        "| path | pipeline alone, samples/s | trainer, steady samples/s | trainer epoch s | per round (trainer) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for pipeline in PIPELINES:
        f = figures[pipeline]
        rounds = ", ".join(f"{v:,.0f}" for v in f["trainer"])
        lines.append(
            f"| {pipeline} | {med(f['pipeline']):,.0f} | {med(f['trainer']):,.0f} | "
            f"{med(f['epoch_s']):.2f} | {rounds} |"
        )
    mem, stream = figures["memory"], figures["stream"]
    lines += [
        "",
        f"In-memory / streamed: pipeline alone **{med(mem['pipeline']) / med(stream['pipeline']):.1f}×**, "
        f"trainer **{med(mem['trainer']) / med(stream['trainer']):.2f}×**.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device; use --device cpu.")
    if args.epochs < 2:
        sys.exit("error: --epochs must be >= 2 (the first epoch pays for start-up).")
    with tempfile.TemporaryDirectory() as tmp:
        root = write_mnist_format(tmp, args.format, train=args.train, test=args.test)
        figures = measure(args, root)
        workers = plan_data(DataConfig(name=args.format, pipeline="stream"), None, None).workers
    text = table(args, figures, workers)
    path = destination.folder(args) / f"input_pipeline_{device.type}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return figures


if __name__ == "__main__":
    main()
