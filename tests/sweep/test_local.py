"""The local backend end to end: real trial processes on small_cnn/digits, one epoch each."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.sweep_commands import TRIAL
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.report import leaderboard as report
from trainer.sweep.search import classic as engine
from trainer.sweep.store.directory import write_sweep_yaml

COMMAND = [*TRIAL, "trainer.max_epochs=1", "trainer.max_steps=4"]


def _config(method, parameters, **extra):
    return {
        "method": method,
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": parameters,
        "command": COMMAND,
        **extra,
    }


@pytest.mark.slow
def test_grid_sweep_runs_every_point_and_reports(tmp_path, capsys):
    config = _config(
        "grid",
        {"optimizer.lr": {"values": [0.01, 0.001]}, "data.batch_size": {"values": [128, 256]}},
    )
    res = run_sweep(config, SweepOptions(agents=2), root=tmp_path)
    out = capsys.readouterr().out
    sweep_id = res["sweep_id"]
    directory = tmp_path / "sweeps" / sweep_id
    assert f"sweep {sweep_id}" in out and "rank" in out
    assert yaml.safe_load((directory / "sweep.yaml").read_text()) == config
    assert [r["state"] for r in res["runs"]] == ["finished"] * 4
    points = {(r["params"]["optimizer.lr"], r["params"]["data.batch_size"]) for r in res["runs"]}
    assert points == {(lr, b) for lr in (0.01, 0.001) for b in (128, 256)}
    for r in res["runs"]:
        assert 0.0 <= r["metric"] <= 1.0 and r["run_dir"].endswith(f"runs/{r['id']}")
        assert "compile_s" in r
    metrics = [r["metric"] for r in res["runs"]]
    assert metrics == sorted(metrics, reverse=True)
    on_disk = json.loads((directory / "results.json").read_text())
    assert on_disk["sweep_id"] == sweep_id and on_disk["backend"] == "local"
    assert on_disk["engine"] == engine.engine_name()  # which code decided the runs
    assert on_disk["best"]["id"] == res["runs"][0]["id"]
    best = yaml.safe_load((directory / "best.yaml").read_text())
    p = res["best"]["params"]
    assert best[:6] == COMMAND[5:]
    assert f"optimizer.lr={p['optimizer.lr']}" in best
    assert f"data.batch_size={p['data.batch_size']}" in best

    # The report commands read the same store.
    assert sweep_cli(["--root", str(tmp_path), "show", sweep_id]) == 0
    assert (directory / "sweep.png").stat().st_size > 0
    assert sweep_cli(["--root", str(tmp_path), "ls"]) == 0
    listing = capsys.readouterr().out
    assert sweep_id in listing and "grid" in listing and "finished" in listing


@pytest.mark.slow
def test_random_sweep_stops_at_run_cap(tmp_path):
    config = _config(
        "random",
        {"optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1}},
        run_cap=2,
    )
    res = run_sweep(config, SweepOptions(agents=2), root=tmp_path)
    assert len(res["runs"]) == 2
    assert all(r["state"] == "finished" for r in res["runs"])
    assert all(1e-4 <= r["params"]["optimizer.lr"] <= 1e-1 for r in res["runs"])


@pytest.mark.slow
def test_bayes_sweep_runs_a_few_and_count_limits_each_agent(tmp_path):
    config = _config("bayes", {"optimizer.lr": {"min": 0.001, "max": 0.1}})
    res = run_sweep(config, SweepOptions(agents=2, count=1), root=tmp_path)
    assert len(res["runs"]) == 2 and all(r["state"] == "finished" for r in res["runs"])
    assert res["best"] is not None


def test_write_sweep_yaml_is_exactly_the_config(tmp_path):
    config = _config("grid", {"model": {"values": ["small_cnn"]}}, name="n")
    write_sweep_yaml(config, tmp_path / "sweep.yaml")
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text()) == config
    assert list(yaml.safe_load((tmp_path / "sweep.yaml").read_text())) == list(config)


def test_best_overrides_are_fixed_overrides_plus_params():
    config = _config("grid", {"a": {"values": [1]}})
    best = {"params": {"optimizer.lr": 1e-05, "model": "small_cnn"}}
    assert report.best_overrides(config, best) == [
        *COMMAND[5:],
        "optimizer.lr=1e-05",
        "model=small_cnn",
    ]


def test_leaderboard_shows_compile_cache_hits_and_misses_per_run():
    compiled = report._compile_info(
        {
            "perf": {"compile_s": 1.4},
            "compile": {
                "enabled": True,
                "fxgraph_cache_hit": 3,
                "fxgraph_cache_miss": 0,
                "aot_autograd_cache_hit": 2,
                "aot_autograd_cache_miss": 1,
                "graphs": 1,
            },
        }
    )
    assert compiled["compile_s"] == 1.4 and "graphs" not in compiled
    assert report._cache_hits(compiled) == "5/1"
    eager = report._compile_info({"compile": {"enabled": False, "fxgraph_cache_hit": 0}})
    assert report._cache_hits(eager) == "-"


def _res(params):
    runs = [
        {"id": f"run{i:05d}", "state": "finished", "params": params, "metric": 0.5 + i / 100,
         "duration_s": 12.3, "compile_s": 1.25, "compiled": True, "fxgraph_cache_hit": 1}
        for i in range(3)
    ]  # fmt: skip
    return {"sweep_id": "abc", "method": "grid", "metric": {"name": "val/acc"}, "runs": runs,
            "best": runs[0]}  # fmt: skip


def test_leaderboard_stays_readable_at_80_columns():
    import io

    from rich.console import Console

    params = {"optimizer.lr": 0.0012345, "optimizer.weight_decay": 5e-4, "model": "mobilenet_v3_small",
              "data.batch_size": 256}  # fmt: skip
    line = "optimizer.lr=0.001234 optimizer.weight_decay=0.0005 model=mobilenet_v3_small data.batch_size=256"
    narrow = Console(file=io.StringIO(), width=80, force_terminal=False)
    report.print_leaderboard(_res(params), console=narrow)
    text = narrow.file.getvalue()
    assert all(len(row) <= 80 for row in text.splitlines())
    assert "run00000" in text and "cache hit/miss" in text and "0.5" in text
    assert line in " ".join(text.split())  # parameters whole, not folded into 3-char columns
    wide = Console(file=io.StringIO(), width=250, force_terminal=False)
    report.print_leaderboard(_res(params), console=wide)
    assert line in wide.file.getvalue() and "parameters:" not in wide.file.getvalue()


def test_results_and_best_yaml_are_written_atomically(tmp_path, monkeypatch):
    from trainer.sweep.store.database import SweepStore
    from trainer.sweep.store.directory import SweepLayout

    layout = SweepLayout(tmp_path)
    store = SweepStore(layout.db)
    store.set("config", _config("grid", {"a": {"values": [1]}}))
    written = []
    monkeypatch.setattr(report, "write_text_atomic", lambda path, text: written.append(path))
    report.write(store, "abc", layout)
    assert sorted(written) == sorted([layout.results, layout.best])


def test_leaderboard_shows_each_runs_gpus_within_80_columns():
    import io

    from rich.console import Console

    res = _res({"optimizer.lr": 0.01})
    for i, run in enumerate(res["runs"]):
        run["devices"] = [str(i % 2)] if i < 2 else ["0", "1"]
    narrow = Console(file=io.StringIO(), width=80, force_terminal=False)
    report.print_leaderboard(res, console=narrow)
    text = narrow.file.getvalue()
    assert all(len(row) <= 80 for row in text.splitlines())
    assert "gpu" in text and "0,1" in text


def test_a_diverged_run_is_failed_and_shown_diverged():
    import io

    from rich.console import Console

    from trainer.sweep.store.records import RunRecord

    run = RunRecord(id="d1", seq=1, state="failed", params={}, summary={"status": "diverged"})
    assert report._entry(run, [], multi=False)["diverged"]
    res = _res({"optimizer.lr": 1e8})
    res["runs"][2].update(state="failed", diverged=True, metric=None)
    narrow = Console(file=io.StringIO(), width=80, force_terminal=False)
    report.print_leaderboard(res, console=narrow)
    row = next(line for line in narrow.file.getvalue().splitlines() if "run00002" in line)
    assert "diverged" in row


def test_a_failed_runs_reason_is_its_last_error_line():
    tail = "epoch 1\nTraceback (most recent call last):\n  File x\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert report.failure_reason(tail).startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert report.failure_reason("a\nkilled by SIGKILL\n") == "killed by SIGKILL"
    assert report.failure_reason(None) is None


def test_a_sweep_stopped_with_runs_left_says_how_many_and_how_to_go_on():
    from trainer.sweep.local import runs_left

    line = runs_left("abc", "stopped (2/4 runs)", "python -m trainer.agent abc")
    assert line == (
        "sweep abc stopped with runs left (2/4 runs): its agents took their "
        "hydra.sweeper.count; go on with python -m trainer.agent abc"
    )
