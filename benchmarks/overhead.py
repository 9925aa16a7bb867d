"""Framework overhead: the trainer's steady-state samples/s (`trainer.run.run`) against a bare,
hand-written PyTorch loop doing the same work (model, data on the device, batch, optimizer and
its kernel, precision, channels-last, TF32, compile settings), alternating in one process.
Target: trainer / bare >= 0.97 on a CPU, >= 0.98 on a GPU.

    python -m benchmarks.overhead                       # CPU, small_cnn, compile default
    python -m benchmarks.overhead --device cuda --model resnet18

Writes `overhead_<device>.md` under outputs/benchmarks/ (`--out DIR` elsewhere, `--publish`
replaces the published figure in benchmarks/results/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

from benchmarks import destination
from trainer.config.hydra_version import VERSION_BASE
from trainer.config.paths import conf_dir
from trainer.config.schema import TrainConfig
from trainer.data.plan import Placement, build_data
from trainer.hardware.devices import resolve_precision
from trainer.preflight import validate
from trainer.run import run
from trainer.train import speed
from trainer.train.models import build_model, input_spec
from trainer.train.optim import build_optimizer
from trainer.train.step import sync

TARGETS = {"cpu": 0.97, "cuda": 0.98}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="small_cnn", help="model name (conf/model or torchvision)")
    p.add_argument("--batch", type=int, default=64, help="samples per training step")
    p.add_argument("--steps", type=int, default=40, help="training steps per epoch")
    p.add_argument("--epochs", type=int, default=2, help="epochs per run; the last one is timed")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians reported)")
    p.add_argument("--compile", default="default", help="compile group: default | off | ...")
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--precision", default="32", help="trainer.precision of both loops")
    destination.add_arguments(p)
    return p.parse_args(argv)


def model_overrides(name: str) -> list[str]:
    """A conf/model group by that name, else a torchvision model configured like resnet18."""
    if (Path(conf_dir()) / "model" / f"{name}.yaml").is_file():
        return [f"model={name}"]
    return ["model=resnet18", f"model.name={name}"]


def overrides(args: argparse.Namespace) -> list[str]:
    return [
        *model_overrides(args.model),
        "data=fake",
        f"data.batch_size={args.batch}",
        f"data.num_samples={args.batch * args.steps}",
        f"compile={args.compile}",
        f"compile.backend={args.backend}",
        "logger=none",
        "scheduler=none",
        f"trainer.max_epochs={args.epochs}",
        f"trainer.device={args.device}",
        f"trainer.precision={args.precision}",
        f"trainer.log_every_n_steps={args.steps * args.epochs + 1}",
    ]


def trainer_samples_per_s(cfg) -> float:
    """Steady samples/s of the trainer's last epoch, as it reports it."""
    with tempfile.TemporaryDirectory() as out:
        result = run(cfg, run_dir=out)
    return result["perf/samples_per_s"]


def bare_samples_per_s(conf: TrainConfig, device: torch.device) -> float:
    """The same training by hand: a plain loop over the same device batches, the same SGD kernel,
    autocast, memory format and TF32 flags, torch.compile; last epoch timed."""
    torch.compiler.reset()
    torch.manual_seed(conf.trainer.seed)
    t = conf.trainer
    speed.apply_backend_flags(tf32=t.tf32, cudnn_benchmark=t.cudnn_benchmark, device=device)
    channels, size = input_spec(conf.model)
    data = build_data(
        conf.data, channels=channels, size=size, seed=t.seed, placement=Placement(device=device)
    )
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=data.num_classes, in_channels=in_ch, image_size=height
    ).to(device)
    if speed.maybe_channels_last(model, t.channels_last, device):
        data.set_memory_format(torch.channels_last)
    optimizer = build_optimizer(conf.optimizer, model)
    dtype = resolve_precision(t.precision, device)
    c = conf.compile
    if not c.disable:
        model = torch.compile(model, mode=c.mode, backend=c.backend, dynamic=c.dynamic)
    model.train()
    samples, seconds = 0, 0.0
    for _ in range(t.max_epochs):
        sync(device)
        start = time.perf_counter()
        samples = 0
        for x, y in data.train:
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            samples += y.shape[0]
        sync(device)
        seconds = time.perf_counter() - start
    return samples / seconds


def main(argv: list[str] | None = None) -> float:
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device; use --device cpu.")
    if args.epochs < 2:
        sys.exit("error: --epochs must be >= 2 (the first epoch pays for compilation).")
    with initialize_config_dir(config_dir=conf_dir(), **VERSION_BASE):
        cfg = compose(config_name="train", overrides=overrides(args))
    conf = validate(cfg)
    trainer, bare = [], []
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}/{args.rounds}: trainer", flush=True)
        trainer.append(trainer_samples_per_s(cfg))
        print(f"round {round_ + 1}/{args.rounds}: bare loop", flush=True)
        bare.append(bare_samples_per_s(conf, device))
    t, b = statistics.median(trainer), statistics.median(bare)
    ratio = t / b
    target = TARGETS.get(device.type, TARGETS["cpu"])
    verdict = "meets" if ratio >= target else "misses"
    text = "\n".join(
        [
            f"`{args.model}`, data `fake`, batch {args.batch}, {args.steps} steps/epoch, "
            f"{args.epochs} epochs (last one timed), compile `{args.compile}` backend "
            f"`{args.backend}`, precision `{args.precision}`, device `{args.device}`, torch "
            f"{torch.__version__}; medians of "
            f"{args.rounds} alternating round(s).",
            "",
            "| loop | steady samples/s | per round |",
            "| --- | ---: | --- |",
            f"| trainer (`trainer.run.run`) | {t:,.0f} | {', '.join(f'{v:,.0f}' for v in trainer)} |",
            f"| bare PyTorch loop | {b:,.0f} | {', '.join(f'{v:,.0f}' for v in bare)} |",
            "",
            f"Ratio trainer / bare: **{ratio:.3f}** ({verdict} the target of {target}).",
            "",
        ]
    )
    path = destination.folder(args) / f"overhead_{device.type}.md"
    path.write_text(text)
    print(text)
    print(f"ratio trainer / bare = {ratio:.3f} (target >= {target}); wrote {path}")
    return ratio


if __name__ == "__main__":
    main()
