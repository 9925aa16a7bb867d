"""A trial on a "fresh machine" (an empty TRAINER_CACHE_DIR) with the sweep's compile-cache
bundle, against a cold compile. Per model and round, each a fresh trial process:

- cold: empty cache dir, empty bundle (this trial compiles and fills the bundle);
- bundle: another empty cache dir with that bundle (what every other machine of the sweep pays);
- mega-cache: another empty cache dir loaded with torch.compiler.save_cache_artifacts() of the
  cold trial (torch's portable cache, the alternative to shipping the cache dir's files);
- warm: the cold trial's own cache dir again (the same machine, for reference).

Prints a table; writes compile_cache_<device>.md and .json under outputs/benchmarks/ (`--out DIR`
elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.compile_cache [--models resnet18] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import destination
from trainer.config.hydra_version import VERSION_BASE

VARIANTS = ("cold", "bundle", "mega-cache", "warm")


def _overrides(model: str, run_dir: Path) -> list[str]:
    data = ["data=digits"] if model == "small_cnn" else ["data=fake", "data.num_samples=512"]
    return [
        f"model={model}",
        *data,
        "logger=none",
        "trainer.max_epochs=1",
        "trainer.max_steps=3",
        f"hydra.run.dir={run_dir}",
    ]


def worker(argv: list[str]) -> None:
    """In a fresh process: load (or, after the run, save) torch's mega-cache around one run."""
    import torch
    from hydra import compose, initialize_config_dir

    from trainer.compiling import configure_cache
    from trainer.config.paths import conf_dir
    from trainer.config.schema import CompileConfig
    from trainer.run import run

    mode, artifacts, overrides = argv[0], Path(argv[1]), argv[2:]
    configure_cache(CompileConfig(cache_dir=os.environ["TRAINER_CACHE_DIR"]))  # before loading
    if mode == "load":
        torch.compiler.load_cache_artifacts(artifacts.read_bytes())
    with initialize_config_dir(config_dir=conf_dir(), **VERSION_BASE):
        cfg = compose(config_name="train", overrides=overrides)
    run_dir = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir="))
    run(cfg, run_dir=run_dir)
    if mode == "save":
        artifacts.write_bytes(torch.compiler.save_cache_artifacts()[0])


def _trial(argv: list[str], cache: Path, bundle: Path | None, run_dir: Path) -> dict:
    env = {**os.environ, "TRAINER_CACHE_DIR": str(cache)}
    env["TRAINER_CACHE_BUNDLE"] = str(bundle) if bundle else "off"
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"trial failed ({done.returncode}):\n{done.stderr[-3000:]}")
    doc = json.loads((run_dir / "summary.json").read_text())
    comp, cache_report = doc["compile"], doc["compile"].get("cache") or {}
    return {
        "compile_s": doc["perf"]["compile_s"],
        "pull_s": cache_report.get("pull_s", 0.0),
        "process_s": wall,
        "hits": comp["fxgraph_cache_hit"] + comp["aot_autograd_cache_hit"],
        "misses": comp["fxgraph_cache_miss"] + comp["aot_autograd_cache_miss"],
        "files_in": cache_report.get("pulled", 0),
    }


def one_round(model: str, tmp: Path) -> dict[str, dict]:
    trainer = [sys.executable, "-m", "trainer"]
    mega = [sys.executable, "-m", "benchmarks.compile_cache", "--worker"]
    blob, bundle, rows = tmp / "mega.bin", tmp / "bundle", {}
    for variant in VARIANTS:
        run_dir = tmp / "runs" / variant  # not tmp / "bundle": that is the bundle
        overrides = _overrides(model, run_dir)
        if variant == "cold":
            argv, cache, used = [*mega, "save", str(blob), *overrides], tmp / "c-cold", bundle
        elif variant == "bundle":
            argv, cache, used = [*trainer, *overrides], tmp / "c-bundle", bundle
        elif variant == "mega-cache":
            argv, cache, used = [*mega, "load", str(blob), *overrides], tmp / "c-mega", None
        else:
            argv, cache, used = [*trainer, *overrides], tmp / "c-cold", None
        rows[variant] = _trial(argv, cache, used, run_dir)
        print(f"{model} {variant}: {json.dumps(rows[variant])}", flush=True)
    rows["bundle"]["bundle_mb"] = (
        sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) / 2**20
    )
    return rows


def _table(results: dict[str, list[dict]]) -> list[str]:
    lines = [
        "| model | variant | compile s (median) | pull s | trial process s | hits / misses | files in | cold / this |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for model, rounds in results.items():
        cold = statistics.median(r["cold"]["compile_s"] for r in rounds)
        for variant in VARIANTS:
            rows = [r[variant] for r in rounds]
            compile_s = statistics.median(r["compile_s"] for r in rows)
            pull_s = statistics.median(r["pull_s"] for r in rows)
            lines.append(
                f"| {model} | {variant} | {compile_s:.2f} | {pull_s:.2f} | "
                f"{statistics.median(r['process_s'] for r in rows):.1f} | "
                f"{rows[-1]['hits']} / {rows[-1]['misses']} | {rows[-1]['files_in']} | "
                f"{cold / (compile_s + pull_s):.1f}x |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--models", default="resnet18", help="comma-separated (small_cnn: digits)")
    parser.add_argument("--rounds", type=int, default=2)
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    results: dict[str, list[dict]] = {}
    for model in args.models.split(","):
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="compile-cache-bench-") as tmp:
                results.setdefault(model, []).append(one_round(model, Path(tmp)))
    import torch

    out = destination.folder(args)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    bundle_mb = statistics.median(r["bundle"]["bundle_mb"] for rs in results.values() for r in rs)
    lines = [
        "# Compile cache on a fresh machine",
        "",
        f"{machine}; CPU, fp32; {args.rounds} round(s) per model, each variant a fresh trial process "
        f"(3 training steps, batch 64; small_cnn on digits, other models on 32x32 fake images). "
        f"Bundle: {bundle_mb:.1f} MB (median).",
        "compile s: first training step and first evaluation batch minus steady ones (summary.json perf.compile_s); "
        "pull s: putting the bundle in place; cold / this: cold compile s over this variant's compile s + pull s.",
        "",
        *_table(results),
    ]
    print("\n".join(lines))
    (out / "compile_cache_cpu.md").write_text("\n".join(lines) + "\n")
    (out / "compile_cache_cpu.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'compile_cache_cpu.md'}")


if __name__ == "__main__":
    main()
