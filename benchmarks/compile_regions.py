"""Regional compile (compile.target=blocks) against the whole model: cold compile seconds of
the first training step and of the first evaluation pass, steady step time, graphs and
recompiles. Each variant runs in a fresh process with an empty Inductor cache (truly cold).

    python -m benchmarks.compile_regions                    # resnet18 and vit_tiny, CPU
    python -m benchmarks.compile_regions --models resnet18 --out /tmp/regions

Writes `compile_regions_<device>.md` and `.json` under benchmarks/results/ (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = ("model", "blocks")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="resnet18,vit_tiny", help="comma-separated model names")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--batch-size", type=int, default=32, help="images per step (32x32, fake)")
    p.add_argument("--steps", type=int, default=5, help="steady steps timed after the first")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "TARGET"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def one(args: argparse.Namespace, model_name: str, target: str) -> dict:
    """Measured in this process (a fresh one, its cache empty): prints one JSON line."""
    import torch

    from trainer.compiling import apply_compile, compile_stats
    from trainer.config.schema import CompileConfig, ModelConfig
    from trainer.train.models import build_model

    torch.manual_seed(0)
    device = torch.device(args.device)
    image = 32
    model = build_model(ModelConfig(name=model_name, kwargs=_kwargs(model_name)),
                        num_classes=10, in_channels=3, image_size=image).to(device)  # fmt: skip
    apply_compile(model, compile_config=CompileConfig(target=target), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, 3, image, image, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)

    def step() -> float:
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - start

    first = step()
    steady = sorted(step() for _ in range(args.steps))[args.steps // 2]
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        model(x)
    first_eval = time.perf_counter() - start
    stats = compile_stats()
    return {"model": model_name, "target": target, "cold_train_s": first - steady,
            "first_eval_s": first_eval, "steady_step_s": steady, "graphs": stats["graphs"],
            "recompiles": stats["recompiles"], "graph_breaks": stats["graph_breaks"]}  # fmt: skip


def _kwargs(model_name: str) -> dict:
    if model_name == "vit_tiny":  # conf/model/vit_tiny.yaml
        return {"patch_size": 4, "num_layers": 4, "num_heads": 3, "hidden_dim": 192, "mlp_dim": 768}
    return {}


def run_variant(args: argparse.Namespace, model_name: str, target: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": cache}
        cmd = [sys.executable, "-m", "benchmarks.compile_regions", "--one", model_name, target,
               "--device", args.device, "--batch-size", str(args.batch_size),
               "--steps", str(args.steps)]  # fmt: skip
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"# Regional compile vs whole model ({args.device}, Inductor, batch {args.batch_size}, "
        "32x32 images)",
        "",
        f"Each variant in a fresh process with an empty Inductor cache, measured once "
        f"({os.cpu_count()} CPUs, load average {args.load:.1f} at the start): compare "
        "the variants of one model; seconds move with the machine's other work.",
        "",
        "| model | target | cold compile, first train step (s) | first eval pass (s) | "
        "steady step (s) | graphs | recompiles | breaks |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['target']} | {r['cold_train_s']:.1f} | {r['first_eval_s']:.1f} "
            f"| {r['steady_step_s']:.3f} | {r['graphs']} | {r['recompiles']} | {r['graph_breaks']} |"
        )
    command = "python -m benchmarks.compile_regions" + (
        f" --models {args.models}" if args.models != "resnet18,vit_tiny" else ""
    )
    return "\n".join([*lines, "", f"Command: `{command}`", ""])


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    args.load = os.getloadavg()[0]  # the machine's other work, as the measurement starts
    if args.one:
        print(json.dumps(one(args, *args.one)))
        return []
    rows = [run_variant(args, m, t) for m in args.models.split(",") for t in TARGETS]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"compile_regions_{args.device}"
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    stem.with_suffix(".md").write_text(table(rows, args))
    print(table(rows, args))
    return rows


if __name__ == "__main__":
    main()
