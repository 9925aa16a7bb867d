"""The benchmark scripts run end to end with tiny arguments and write their result files."""

from __future__ import annotations

import json

import pytest

from benchmarks import compile_modes, destination, overhead


def test_compile_modes_writes_table_json_and_chart(tmp_path):
    args = ["--models", "small_cnn", "--modes", "default,reduce-overhead"]
    args += ["--batch", "16", "--image-size", "16", "--backend"]
    args += ["aot_eager", "--steps", "3", "--warmup", "1", "--rounds", "1", "--out", str(tmp_path)]
    results = compile_modes.main(args)
    variants = results["small_cnn"]
    assert list(variants) == ["eager", "default"]  # CUDA-graph mode skipped on the CPU
    assert variants["default"].graphs == 1 and variants["default"].recompiles == 0
    assert len(variants["default"].cold_s) == len(variants["default"].warm_s) == 1
    table = (tmp_path / "compile_modes_cpu.md").read_text()
    assert "| small_cnn | default |" in table and "skipped on cpu: reduce-overhead" in table
    assert json.loads((tmp_path / "compile_modes_cpu.json").read_text())["small_cnn"]["eager"]
    assert (tmp_path / "compile_modes_cpu.png").read_bytes()[:4] == b"\x89PNG"


def test_overhead_writes_ratio(tmp_path):
    args = ["--steps", "3", "--batch", "16", "--rounds", "1", "--backend", "aot_eager"]
    args += ["--out", str(tmp_path)]
    ratio = overhead.main(args)
    assert ratio > 0
    text = (tmp_path / "overhead_cpu.md").read_text()
    assert f"**{ratio:.3f}**" in text and "| bare PyTorch loop |" in text


def test_a_trial_run_never_replaces_the_published_figures(tmp_path, monkeypatch, capsys):
    published = destination.PUBLISHED / "overhead_cpu.md"
    before = published.read_bytes()
    monkeypatch.chdir(tmp_path)
    args = ["--steps", "2", "--batch", "8", "--rounds", "1", "--backend", "aot_eager"]
    overhead.main([*args, "--compile", "off"])
    assert published.read_bytes() == before
    written = tmp_path / "outputs" / "benchmarks" / "overhead_cpu.md"
    assert "| bare PyTorch loop |" in written.read_text()
    out = capsys.readouterr().out
    assert (
        "results go to outputs/benchmarks/" in out
        and f"wrote {written.relative_to(tmp_path)}" in out
    )


def test_publish_and_out_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        overhead.parse(["--publish", "--out", "x"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert overhead.parse(["--publish"]).publish is True


def test_sweep_overhead_writes_its_table(tmp_path):
    from benchmarks import sweep_overhead

    argv = ["--trials", "2", "--compile", "off", "--modes", "template", "--out", str(tmp_path)]
    sweep_overhead.main(argv)
    text = (tmp_path / "sweep_overhead.md").read_text()
    assert "| template |" in text and text.count("| finished |") == 2
