"""Framework overhead: the trainer's steady-state samples/s (`trainer.run.run`) against a bare,
hand-written PyTorch loop doing the same work (model, data, batch, optimizer, compile settings),
alternating in one process. Target: trainer / bare >= 0.97.

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
from trainer.config import TrainConfig, validate
from trainer.data import build_data
from trainer.layout import conf_dir
from trainer.loop import sync
from trainer.models import build_model, input_spec
from trainer.run import run

TARGET = 0.97


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
        f"trainer.log_every_n_steps={args.steps * args.epochs + 1}",
    ]


def trainer_samples_per_s(cfg) -> float:
    """Steady samples/s of the trainer's last epoch, as it reports it."""
    with tempfile.TemporaryDirectory() as out:
        result = run(cfg, run_dir=out)
    return result["perf/samples_per_s"]


def bare_samples_per_s(conf: TrainConfig, device: torch.device) -> float:
    """The same training by hand: plain DataLoader loop, SGD, torch.compile; last epoch timed."""
    torch.compiler.reset()
    torch.manual_seed(conf.trainer.seed)
    channels, size = input_spec(conf.model)
    data = build_data(
        conf.data, channels=channels, size=size, seed=conf.trainer.seed, pin_memory=False
    )
    in_ch, height, _ = data.sample_shape
    model = build_model(
        conf.model, num_classes=data.num_classes, in_channels=in_ch, image_size=height
    ).to(device)
    o = conf.optimizer
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=o.lr,
        momentum=o.momentum,
        nesterov=o.nesterov,
        weight_decay=o.weight_decay,
    )
    c = conf.compile
    if not c.disable:
        model = torch.compile(model, mode=c.mode, backend=c.backend, dynamic=c.dynamic)
    model.train()
    samples, seconds = 0, 0.0
    for _ in range(conf.trainer.max_epochs):
        sync(device)
        start = time.perf_counter()
        samples = 0
        for x, y in data.train:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
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
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
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
    verdict = "meets" if ratio >= TARGET else "misses"
    text = "\n".join(
        [
            f"`{args.model}`, data `fake`, batch {args.batch}, {args.steps} steps/epoch, "
            f"{args.epochs} epochs (last one timed), compile `{args.compile}` backend "
            f"`{args.backend}`, device `{args.device}`, torch {torch.__version__}; medians of "
            f"{args.rounds} alternating round(s).",
            "",
            "| loop | steady samples/s | per round |",
            "| --- | ---: | --- |",
            f"| trainer (`trainer.run.run`) | {t:,.0f} | {', '.join(f'{v:,.0f}' for v in trainer)} |",
            f"| bare PyTorch loop | {b:,.0f} | {', '.join(f'{v:,.0f}' for v in bare)} |",
            "",
            f"Ratio trainer / bare: **{ratio:.3f}** ({verdict} the target of {TARGET}).",
            "",
        ]
    )
    path = destination.folder(args) / f"overhead_{device.type}.md"
    path.write_text(text)
    print(text)
    print(f"ratio trainer / bare = {ratio:.3f} (target >= {TARGET}); wrote {path}")
    return ratio


if __name__ == "__main__":
    main()
