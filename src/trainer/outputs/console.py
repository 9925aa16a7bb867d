"""What a person sees: rich progress bars on a terminal (silent otherwise) and the end-of-run
summary table."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from trainer.outputs.summary import RunSummary


class ProgressView:
    """Epoch and step bars; does nothing when stdout is not a terminal (logs, CI, agents)."""

    def __init__(self, total_epochs: int, first_epoch: int, *, enabled: bool = True) -> None:
        self.enabled = enabled and sys.stdout.isatty()
        self._progress: Progress | None = None
        self._total_epochs = total_epochs
        self._first_epoch = first_epoch
        self._epochs = self._steps = None
        self._handlers: list[tuple[logging.StreamHandler, object]] = []

    def __enter__(self) -> ProgressView:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            # Route log lines through rich's stdout proxy so they print above the bars.
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream in (
                    sys.__stdout__,
                    sys.__stderr__,
                ):
                    self._handlers.append((handler, handler.setStream(sys.stdout)))
            self._epochs = self._progress.add_task(
                "epochs", total=self._total_epochs, completed=self._first_epoch, info=""
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
        for handler, stream in self._handlers:
            handler.setStream(stream)  # type: ignore[arg-type]
        self._handlers.clear()

    def start_epoch(self, epoch: int, total_steps: int, done: int) -> None:
        if self._progress is None:
            return
        if self._steps is not None:
            self._progress.remove_task(self._steps)
        self._steps = self._progress.add_task(
            f"epoch {epoch + 1}", total=total_steps, completed=done, info=""
        )

    def step(self, steps: int, loss: float | None) -> None:
        if self._progress is not None and self._steps is not None:
            info = f"loss {loss:.4f}" if loss is not None else ""
            self._progress.update(self._steps, completed=steps, info=info)

    def end_epoch(self, metrics: dict[str, float]) -> None:
        if self._progress is not None and self._epochs is not None:
            info = f"val/acc {metrics['val/acc']:.4f}  val/loss {metrics['val/loss']:.4f}"
            self._progress.update(self._epochs, advance=1, info=info)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def compile_label(comp: dict[str, Any]) -> str:
    """`off`, `inductor, mode max-autotune` or, for a backend without modes, its name."""
    if not comp["enabled"]:
        return "off"
    if comp.get("backend") == "inductor" and comp.get("mode"):
        return f"{comp['backend']}, mode {comp['mode']}"
    return str(comp.get("backend"))


def _compile_rows(table: Table, summary: RunSummary) -> None:
    perf, comp = summary.perf, summary.compile
    table.add_row("compile", compile_label(comp))
    if comp.get("auto"):
        auto = comp["auto"]
        table.add_row(
            "compile=auto",
            f"{auto['decision']}: eager {_fmt(auto['eager_total_s'])} s vs compiled "
            f"{_fmt(auto['compiled_total_s'])} s ({_fmt(auto['compile_cost_s'])} s compile, "
            f"{auto['cache_state']} cache) for {auto['planned_steps']} steps",
        )
    if not comp["enabled"]:
        return
    table.add_row(
        "compile time",
        f"{_fmt(perf['compile_s'])} s (Dynamo counted {_fmt(comp['dynamo_compile_s'])} s)",
    )
    table.add_row("graphs / breaks", f"{comp['graphs']} / {comp['graph_breaks']}")
    for reason, count in list(comp["graph_break_reasons"].items())[:3]:
        table.add_row("  break", f"{count}x {reason}")
    table.add_row("recompiles", str(comp["recompiles"]))
    for reason in comp["recompile_reasons"][-3:]:
        table.add_row("  recompile", reason)
    hits = {k: v for k, v in comp.items() if "cache_hit" in k or "cache_miss" in k}
    table.add_row("cache hit / miss", ", ".join(f"{k} {v}" for k, v in hits.items()))
    cache = comp.get("cache") or {}
    if cache.get("bundle"):
        table.add_row("cache bundle", f"{cache['pulled']} file(s) in, {cache['pushed']} added")
    if cache.get("miss_reason"):
        table.add_row("cache miss", cache["miss_reason"])
    if comp["cudagraph_skips"]:
        reasons = "; ".join(comp.get("cudagraph_skip_reasons") or [])
        table.add_row(
            "CUDA-graph skips", f"{comp['cudagraph_skips']}" + (f": {reasons}" if reasons else "")
        )


def _speed_rows(table: Table, summary: RunSummary) -> None:
    """Where the data lived, what augmented it, which weights val/* measured, the GPU settings."""
    data, speed = summary.data, summary.speed
    if data:
        ops = ", ".join(data["augment_ops"]) or "none"
        table.add_row("data", f"{data['pipeline']} ({data['stored_on']}), augment: {ops}")
    if summary.val_weights != "model":
        table.add_row("val/* weights", f"{summary.val_weights} (trainer.ema)")
    if speed:
        on = [k for k in ("tf32", "cudnn_benchmark", "channels_last") if speed.get(k)]
        table.add_row(
            "speed", f"{', '.join(on) or 'fp32 defaults'}; {speed['optimizer_kernel']} optimizer"
        )


def print_paths(rows: list[tuple[str, Any]]) -> None:
    """Paths on lines of their own, never folded: a terminal may wrap them, but a copy of the
    line is the whole path."""
    width = max(len(name) for name, _ in rows)
    console = Console(soft_wrap=True, highlight=False)
    for name, value in rows:
        console.print(f"[bold]{name:<{width}}[/bold]  {value}")


def warm_up() -> None:
    """Render a table as `print_summary` does, into memory: rich builds its caches at a
    process's first table (6 ms). A sweep's trial template calls it once, so that none of the
    trials forked from it pays them at its end."""
    table = Table(title="run", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("val/acc", "0.5")
    Console(soft_wrap=True, file=io.StringIO()).print(table)
    Console(soft_wrap=True, highlight=False, file=io.StringIO()).print("[bold]summary[/bold]  /")


def print_summary(summary: RunSummary) -> None:
    """The end-of-run table: final metrics, best metric, compile cost, throughput; then the
    locations, one a line."""
    table = Table(title=f"run {summary.status}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in summary.metrics.items():
        if not name.startswith("perf/"):
            table.add_row(name, _fmt(value))
    best = summary.best
    if best["value"] is not None:
        table.add_row(f"best {best['name']}", f"{_fmt(best['value'])} (epoch {best['epoch']})")
    _compile_rows(table, summary)
    perf = summary.perf
    table.add_row("steady samples/s", _fmt(perf["samples_per_s"]))
    table.add_row("steady step", f"{_fmt(perf['step_ms'])} ms")
    table.add_row("device / precision", f"{summary.device} / {summary.precision}")
    _speed_rows(table, summary)
    Console(soft_wrap=True).print(table)
    paths = summary.paths
    rows = [("checkpoint", paths["checkpoint"]), ("summary", paths["summary"])]
    if paths.get("wandb_run_dir"):
        rows.append(("W&B run", paths["wandb_run_dir"]))
    if paths.get("compile_trace"):
        rows.append(("compile trace", paths.get("compile_report") or paths["compile_trace"]))
    print_paths(rows)


def print_evaluation(report: dict[str, Any]) -> None:
    """The table of `python -m trainer.evaluate`: latency, throughput and accuracy."""
    table = Table(title="evaluation", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    comp = report["compile"]
    compiled = compile_label(comp)
    lat = report["latency_ms"]
    rows = [
        ("model / data", f"{report['model']} / {report['data']}"),
        ("device / precision", f"{report['device']} / {report['precision']}"),
        ("compile", compiled),
        ("batch size", report["batch_size"]),
        ("first call", f"{_fmt(lat['first_call'])} ms"),
        ("steady p50 / p95", f"{_fmt(lat['p50'])} / {_fmt(lat['p95'])} ms"),
        ("throughput", f"{_fmt(report['samples_per_s'])} samples/s"),
        ("val/acc", _fmt(report["val/acc"])),
        ("val/loss", _fmt(report["val/loss"])),
        ("graphs", comp.get("graphs", 0)),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    Console(soft_wrap=True).print(table)
    print_paths([("checkpoint", report["checkpoint"]), ("report", report["paths"]["report"])])
