"""The benchmark scripts run end to end with tiny arguments and write their result files."""

from __future__ import annotations

import json

import pytest

from benchmarks import compile_modes, destination, gpu_suite, input_pipeline, overhead


@pytest.mark.slow
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


@pytest.mark.slow
def test_overhead_writes_ratio(tmp_path):
    args = ["--steps", "3", "--batch", "16", "--rounds", "1", "--backend", "aot_eager"]
    args += ["--out", str(tmp_path)]
    ratio = overhead.main(args)
    assert ratio > 0
    text = (tmp_path / "overhead_cpu.md").read_text()
    assert f"**{ratio:.3f}**" in text and "| bare PyTorch loop |" in text


@pytest.mark.slow
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


@pytest.mark.slow
def test_sweep_overhead_writes_its_table(tmp_path):
    from benchmarks import sweep_overhead

    argv = ["--trials", "2", "--compile", "off", "--modes", "template", "--out", str(tmp_path)]
    sweep_overhead.main(argv)
    text = (tmp_path / "sweep_overhead.md").read_text()
    assert "| template |" in text and text.count("| finished |") == 2


@pytest.mark.slow
def test_sweep_cluster_writes_its_table(tmp_path):
    from benchmarks import sweep_cluster

    argv = ["--trials", "2", "--agents", "1", "--launchers", "basic", "--out", str(tmp_path)]
    (summary,) = sweep_cluster.main(argv)
    assert summary["launcher"] == "basic" and summary["trials finished"] == 2
    assert summary["handout_to_loop_s, median"] > 0
    text = (tmp_path / "sweep_cluster.md").read_text()
    assert text.count("| basic |") == 3  # the summary row and one per trial
    assert json.loads((tmp_path / "sweep_cluster.json").read_text())["summary"] == [summary]


def test_input_pipeline_compares_resident_and_streamed_batches(tmp_path):
    args = ["--train", "128", "--test", "32", "--batch", "32", "--width", "4", "--rounds", "1"]
    figures = input_pipeline.main([*args, "--augment", "standard", "--out", str(tmp_path)])
    assert set(figures) == {"memory", "stream"}
    assert all(f["pipeline"][0] > 0 and f["trainer"][0] > 0 for f in figures.values())
    text = (tmp_path / "input_pipeline_cpu.md").read_text()
    assert "| memory |" in text and "| stream |" in text and "In-memory / streamed" in text
    chosen = input_pipeline.overrides(
        input_pipeline.parse([*args, "--threads", "1"]), tmp_path, "stream"
    )
    assert {"model.width=4", "trainer.num_threads=1", "data.pipeline=stream"} <= set(chosen)


def test_gpu_suite_dry_run_prints_the_steps_on_any_machine(capsys):
    assert gpu_suite.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "at most 480 s" in out and "gpu_<device name>.md" in out
    assert "python -m pytest -m gpu" in out and "python -m benchmarks.overhead --device cuda" in out
    assert "--models resnet50 --image-size 224" in out and "--augment standard" in out
    assert sum(s.timeout_s for s in gpu_suite.steps()) <= 8 * 60


def test_gpu_suite_report_checks_the_targets(tmp_path):
    suite = gpu_suite.steps()
    folders = [tmp_path / str(i) for i in range(len(suite))]
    for folder in folders:
        folder.mkdir()
    suite[0].output, suite[0].status = "5 passed, 1 skipped in 99.0s", "ok"

    def rows(model, variants):
        doc = {model: {k: {"samples_per_s": [v], "recompiles": 0, "cudagraph_skips": 0}
                       for k, v in variants.items()}}  # fmt: skip
        return json.dumps(doc)

    (folders[1] / "compile_modes_cuda.json").write_text(
        rows("resnet50", {"eager": 1000.0, "default": 1500.0, "reduce-overhead": 1600.0})
    )
    (folders[2] / "compile_modes_cuda.json").write_text(rows("resnet50", {"eager": 990.0}))
    (folders[4] / "overhead_cuda.md").write_text("Ratio trainer / bare: **0.990** (meets).")
    (folders[6] / "sweep_devices.md").write_text("Speed-up of packing: **1.70×**.")
    text = gpu_suite.report("NVIDIA H200", suite, folders, "2.x")
    assert "resnet50 bf16 compiled (reduce-overhead) / eager: 1.60× (meets 1.43×)" in text
    assert "0 recompiles, 0 CUDA-graph skips" in text and "0.990 (meets 0.98)" in text
    assert "4 trials, 2 per GPU, against one at a time: 1.70× faster" in text
    assert (
        "`5 passed, 1 skipped in 99.0s`" in text
        and gpu_suite.device_slug("NVIDIA H200") == "nvidia_h200"
    )


@pytest.mark.slow
def test_sweep_devices_packs_trials_on_a_device(tmp_path):
    from benchmarks import sweep_devices

    args = ["--devices", "0", "--trials", "2", "--model", "small_cnn", "--steps", "2"]
    args += ["--samples", "64"]
    figures = sweep_devices.main([*args, "--out", str(tmp_path)])
    assert figures["runs"] == [("finished", "0")] * 4
    assert "Speed-up of packing" in (tmp_path / "sweep_devices.md").read_text()


@pytest.mark.slow
def test_pbt_writes_its_table(tmp_path):
    from benchmarks import pbt

    args = ["--seeds", "0", "--members", "2", "--epochs", "2", "--methods", "pbt,random"]
    rows = pbt.main([*args, "--out", str(tmp_path)])
    assert [r["method"] for r in rows] == ["pbt", "random"]
    assert all(r["runs"] == 2 and r["epochs"] == 4 and r["recompiles"] == 0 for r in rows)
    text = (tmp_path / "pbt.md").read_text()
    assert "| pbt | 1 |" in text and "The best final val/acc came from" in text
    assert json.loads((tmp_path / "pbt.json").read_text())[0]["method"] == "pbt"
