"""Eager vs every torch.compile mode, in one process and in alternating rounds: cold and warm
compile time, steady samples/s, ratio to eager, graphs and recompiles per model.

    python -m benchmarks.compile_modes                  # CPU, small_cnn and resnet18
    python -m benchmarks.compile_modes --device cuda    # the GPU variant, CUDA-graph modes too

Writes `compile_modes_<device>.md`, `.json` and `.png` under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainer.compiling import apply_compile, torch_private
from trainer.config.schema import CompileConfig, DataConfig, ModelConfig, OptimizerConfig
from trainer.data.plan import Placement, build_data
from trainer.hardware.devices import grad_scaler, resolve_precision
from trainer.train import speed
from trainer.train.compile_auto import timed_steps
from trainer.train.models import build_model, input_spec
from trainer.train.optim import build_optimizer
from trainer.train.step import StepRules, train_step

MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # CUDA graphs: nothing to gain on a CPU
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Measure:
    """Figures of one (model, variant) across rounds."""

    cold_s: list[float] = field(default_factory=list)  # first step minus steady step, cold cache
    warm_s: list[float] = field(default_factory=list)  # same, after a reset with the cache filled
    samples_per_s: list[float] = field(default_factory=list)
    graphs: int = 0
    recompiles: int = 0
    cudagraph_skips: int = 0  # Inductor's count (CUDA-graph modes); 0 means graphs were used
    cache_hits: int = 0  # FX graph cache hits of the warm compile


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="small_cnn,resnet18", help="comma-separated model names")
    p.add_argument("--data", default="fake", help="data set of conf/data (fake: random images)")
    p.add_argument("--image-size", type=int, default=32, help="fake: square image size, pixels")
    p.add_argument("--batch", type=int, default=64, help="samples per training step")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated compile modes")
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--precision", default="32", help="32 | bf16-mixed | 16-mixed (autocast)")
    p.add_argument("--steps", type=int, default=20, help="timed steady steps per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (medians reported)")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    return p.parse_args(argv)


def batches_for(args: argparse.Namespace, model: str, device: torch.device):
    channels, size = input_spec(ModelConfig(name=model, image_size=args.image_size))
    data_cfg = DataConfig(
        name=args.data,
        batch_size=args.batch,
        num_samples=args.batch * 4,
        image_shape=[3, args.image_size, args.image_size],
    )
    data = build_data(
        data_cfg, channels=channels, size=size, seed=0, placement=Placement(device=device)
    )
    batches = list(itertools.islice(data.train, 4))  # on the device already
    return batches, data


def one_compile(
    args, model_name, data, batches, mode, device
) -> tuple[float, float, int, int, int]:
    """Build a fresh model (compiled when `mode` is set), take its first step, then the steady
    steps. Returns (first step s, steady step s, graphs, recompiles after the first step,
    CUDA-graph skips)."""
    counters = torch_private.counters()

    torch.manual_seed(0)
    in_ch, height, _ = data.sample_shape
    model = build_model(
        ModelConfig(name=model_name, image_size=args.image_size),
        num_classes=data.num_classes,
        in_channels=in_ch,
        image_size=height,
    ).to(device)
    # what training does by default: channels-last conv models on CUDA, fused SGD, TF32
    if speed.maybe_channels_last(model, "auto", device):
        batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in batches]
    if mode is not None:
        apply_compile(model, compile_config=CompileConfig(mode=mode, backend=args.backend))
    optimizer = build_optimizer(OptimizerConfig(lr=0.01, weight_decay=0.0), model)
    feed = itertools.cycle(batches)
    scaler = grad_scaler(args.precision, device)
    dtype = resolve_precision(args.precision, device)

    def step() -> None:
        x, y = next(feed)
        train_step(model, optimizer, scaler, x, y, StepRules(device, dtype))

    counters.clear()
    (first,) = timed_steps(step, 1, device)
    graphs_first = int(counters["stats"]["unique_graphs"])
    timed_steps(step, args.warmup, device)
    steady = statistics.median(timed_steps(step, args.steps, device))
    graphs = int(counters["stats"]["unique_graphs"])
    skips = int(counters["inductor"].get("cudagraph_skips", 0))
    return first, steady, graphs, graphs - graphs_first, skips


def measure(args, model_name, data, batches, mode, device, m: Measure) -> None:
    """One round of one variant: cold compile in a fresh cache, then a warm one."""
    counters = torch_private.counters()
    if mode is None:
        first, steady, *_ = one_compile(args, model_name, data, batches, None, device)
        m.samples_per_s.append(args.batch / steady)
        return
    with (
        torch_private.fresh_inductor_cache()
    ):  # an empty Inductor/AOTAutograd cache dir, removed afterwards
        torch.compiler.reset()
        first, steady, m.graphs, m.recompiles, m.cudagraph_skips = one_compile(
            args, model_name, data, batches, mode, device
        )
        m.cold_s.append(max(first - steady, 0.0))
        m.samples_per_s.append(args.batch / steady)
        torch.compiler.reset()
        torch_private.clear_inductor_memory_caches()  # in-memory caches only: the on-disk cache stays warm
        first, steady, *_ = one_compile(args, model_name, data, batches, mode, device)
        m.warm_s.append(max(first - steady, 0.0))
        m.cache_hits = int(counters["inductor"].get("fxgraph_cache_hit", 0))
    torch.compiler.reset()


def table(results: dict[str, dict[str, Measure]], args, notes: list[str]) -> str:
    med = statistics.median
    lines = [
        f"Training step, batch {args.batch}, {args.image_size}×{args.image_size} images, data "
        f"`{args.data}`, precision `{args.precision}`, backend `{args.backend}`, device "
        f"`{args.device}`, torch {torch.__version__}; medians of {args.rounds} "
        f"alternating round(s), {args.steps} timed steps each.",
        "",
        "| model | variant | cold compile s | warm compile s | steady samples/s | vs eager "
        "| graphs | recompiles | cudagraph skips |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for model_name, variants in results.items():
        eager = med(variants["eager"].samples_per_s)
        for name, m in variants.items():
            sps = med(m.samples_per_s)
            cold = f"{med(m.cold_s):.1f}" if m.cold_s else "-"
            warm = f"{med(m.warm_s):.1f}" if m.warm_s else "-"
            lines.append(
                f"| {model_name} | {name} | {cold} | {warm} | {sps:,.0f} | {sps / eager:.2f}× "
                f"| {m.graphs} | {m.recompiles} | {m.cudagraph_skips} |"
            )
    lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, dict[str, Measure]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = statistics.median
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, (model_name, variants) in enumerate(results.items()):
        eager = med(variants["eager"].samples_per_s)
        names = list(variants)
        width = 0.8 / len(results)
        xs = [j + i * width for j in range(len(names))]
        axes[0].bar(
            xs, [med(variants[n].samples_per_s) / eager for n in names], width, label=model_name
        )
        compiled = [n for n in names if variants[n].cold_s]
        xc = [j + i * width for j in range(len(compiled))]
        axes[1].bar(
            xc, [med(variants[n].cold_s) for n in compiled], width, label=f"{model_name} cold"
        )
        axes[1].bar(
            xc,
            [med(variants[n].warm_s) for n in compiled],
            width,
            label=f"{model_name} warm",
            hatch="//",
            alpha=0.7,
        )
        centre = width * (len(results) - 1) / 2
        axes[0].set_xticks([j + centre for j in range(len(names))], names, rotation=20, ha="right")
        axes[1].set_xticks(
            [j + centre for j in range(len(compiled))], compiled, rotation=20, ha="right"
        )
    axes[0].axhline(1.0, color="grey", linewidth=0.8)
    axes[0].set_ylabel("steady samples/s ÷ eager")
    axes[1].set_ylabel("compile time, s")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(results, args: argparse.Namespace, notes: list[str], device: torch.device) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"compile_modes_{device.type}"
    text = table(results, args, notes)
    stem.with_suffix(".md").write_text(text)
    doc = {model: {n: vars(m) for n, m in v.items()} for model, v in results.items()}
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2))
    title = f"torch.compile modes, {device.type}, batch {args.batch}"
    chart(results, stem.with_suffix(".png"), title)
    print(text)
    print(f"wrote {stem}.md, .json and .png", flush=True)


def main(argv: list[str] | None = None) -> dict[str, dict[str, Measure]]:
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device; use --device cpu.")
    speed.apply_backend_flags(tf32=True, cudnn_benchmark=True, device=device)  # as training
    notes: list[str] = []
    modes = [m for m in args.modes.split(",") if m]
    if device.type != "cuda":
        skipped = [m for m in modes if m in CUDA_GRAPH_MODES]
        modes = [m for m in modes if m not in CUDA_GRAPH_MODES]
        if skipped:
            notes.append(
                f"skipped on {device.type}: {', '.join(skipped)} (CUDA graphs need a CUDA "
                "device; on a CPU they run as mode default / max-autotune-no-cudagraphs)."
            )
    results: dict[str, dict[str, Measure]] = {}
    for model_name in [m for m in args.models.split(",") if m]:
        batches, data = batches_for(args, model_name, device)
        variants = {"eager": Measure(), **{mode: Measure() for mode in modes}}
        for round_ in range(args.rounds):
            for name, m in variants.items():
                print(f"{model_name}: round {round_ + 1}/{args.rounds}, {name}", flush=True)
                mode = None if name == "eager" else name
                measure(args, model_name, data, batches, mode, device, m)
        results[model_name] = variants
        write(results, args, notes, device)  # after each model: a long run keeps what it measured
    return results


if __name__ == "__main__":
    main()
