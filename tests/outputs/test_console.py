"""The end-of-run table as a person reads it at 80 columns: whole paths, honest compile rows."""

from __future__ import annotations

from trainer.outputs.console import print_summary
from trainer.outputs.summary import RunSummary

LONG = "/home/someone/projects/compiled-trainer/outputs/runs/2026-12-03/14-20-11_resnet18"


def _summary(**compile_kw) -> RunSummary:
    comp = {"enabled": True, "backend": "inductor", "mode": "default", "auto": None,
            "dynamo_compile_s": 2.0, "graphs": 1, "graph_breaks": 0, "graph_break_reasons": {},
            "recompiles": 0, "recompile_reasons": [], "cudagraph_skips": 0,
            "cudagraph_skip_reasons": [], **compile_kw}  # fmt: skip
    return RunSummary(
        status="finished", epochs_completed=1, steps=4, metrics={"val/acc": 0.5},
        best={"name": "val/acc", "value": 0.5, "epoch": 1, "mode": "max"},
        perf={"compile_s": 1.5 if comp["enabled"] else None, "samples_per_s": 10.0,
              "step_ms": 3.0},
        compile=comp, device="cpu", strategy="single", world_size=1, precision="32", cpu={},
        torch="x",
        paths={"checkpoint": f"{LONG}/checkpoints/last.pt", "summary": f"{LONG}/summary.json"},
    )  # fmt: skip


def _printed(capsys, monkeypatch, summary) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    print_summary(summary)
    return capsys.readouterr().out


def test_paths_are_whole_lines_at_80_columns(capsys, monkeypatch):
    out = _printed(capsys, monkeypatch, _summary())
    assert any(line.endswith(f"{LONG}/checkpoints/last.pt") for line in out.splitlines())
    assert any(line.endswith(f"{LONG}/summary.json") for line in out.splitlines())


def test_compile_rows_say_only_what_is_true(capsys, monkeypatch):
    out = _printed(capsys, monkeypatch, _summary(backend="aot_eager", cudagraph_skips=2))
    assert "aot_eager" in out and "mode default" not in out
    assert "CUDA-graph skips" in out and "│ 2 " in out.replace("2:", "2 ")
    off = _printed(capsys, monkeypatch, _summary(enabled=False))
    assert "compile time" not in off and "off" in off
    assert "inductor, mode default" in _printed(capsys, monkeypatch, _summary())


def test_compile_off_run_reports_no_compile_time(cfg_factory, tmp_path, capsys):
    import json

    from trainer.run import run

    run(cfg_factory("compile=off", "logger=none", "trainer.max_epochs=1"), run_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["perf"]["compile_s"] is None  # the leaderboard shows "-", not 0.01 s
    out = capsys.readouterr().out
    assert "compile time" not in out and "off" in out
