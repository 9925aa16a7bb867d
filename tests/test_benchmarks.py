"""The benchmark scripts run end to end with tiny arguments and write their result files."""

from __future__ import annotations

import json

from benchmarks import compile_modes, overhead


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
