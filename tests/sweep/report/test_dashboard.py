"""The dashboard without a browser: a store built here becomes the page's JSON (runs, curves,
timings, command lines, parameter importance) and Plotly figures, each titled; the server
answers the page's requests, only for the sweeps it serves, and leaves the store's files
byte-identical. Without Plotly the command says how to install it (exit 2)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.report.dashboard import figures, snapshot
from trainer.sweep.report.dashboard.catalog import Catalog
from trainer.sweep.report.dashboard.importance import MIN_RUNS, importances
from trainer.sweep.report.dashboard.serving import _server
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_reader

CONFIG = {
    "method": "random",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
        "model": {"values": ["small_cnn", "resnet18"]},
        "data.batch_size": {"value": 64},
    },
    "early_terminate": {"type": "hyperband", "min_iter": 1},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}", "compile=off"],
}
# id, lr, model, state, val/acc per epoch, compiled
RUNS = [
    ("a", 1e-3, "small_cnn", "finished", [0.5, 0.7, 0.9], True),
    ("b", 1e-2, "resnet18", "finished", [0.4, 0.6, 0.8], False),
    ("c", 1e-1, "small_cnn", "stopped", [0.3], True),
    ("d", 3e-4, "resnet18", "finished", [0.2, 0.3, 0.5], True),
    ("e", 5e-2, "small_cnn", "running", [0.6, 0.65], True),
]


def _summary(lr: float, compiled: bool) -> dict:
    return {
        "status": "finished",
        "perf": {"compile_s": 4.0 if compiled else None, "steady_step_s": 0.002, "step_ms": 2.5},
        "compile": {"enabled": compiled, "fx_graph_cache_hit": 2, "fx_graph_cache_miss": 1},
    }


def _sweep(folder: Path, config: dict = CONFIG, runs=RUNS) -> Path:
    store = SweepStore(folder / "sweep.db")
    store.set("config", config)
    store.set("sweep_id", folder.name)
    store.set("state", "running")
    for run_id, lr, model, state, accs, compiled in runs:
        params = {"optimizer.lr": lr, "model": model, "data.batch_size": 64}
        store.claim(lambda _, p=params: (p, None), new_id=lambda i=run_id: i, agent_pid=os.getpid())
        rows = [
            {"epoch": i + 1, "val/acc": acc, "val/loss": 1 - acc, "perf/compile_s": 0.0}
            | {"perf/step_ms": 3.0}
            for i, acc in enumerate(accs)
        ]
        store.add_metrics(run_id, rows, 0)
        if state != "running":
            store.update(run_id, state=state, ended_at=1e9, summary=_summary(lr, compiled))
    store.close()
    return folder


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    return _sweep(tmp_path / "sweeps" / "s1")


def _view(folder: Path) -> dict:
    store = open_reader(folder)
    view = snapshot.view(store, "s1", store.where)
    view["importance"] = importances(view["runs"], view["parameters"], view["objectives"])
    store.close()
    return view


def test_the_view_has_every_run_ranked_with_curves_timings_and_commands(sweep_dir):
    view = _view(sweep_dir)
    assert [r["id"] for r in view["runs"]] == ["a", "b", "e", "d", "c"]  # by val/acc
    assert view["best"] == "a" and view["counts"] == {"finished": 3, "running": 1, "stopped": 1}
    assert view["parameters"] == [  # the constant batch size is no parameter
        {"name": "optimizer.lr", "log": True},
        {"name": "model", "log": False},
    ]
    rows = {r["id"]: r for r in view["runs"]}
    assert rows["a"]["curves"] == {"epoch": [1, 2, 3], "val/acc": [0.5, 0.7, 0.9]}
    assert rows["a"]["command"] == (
        "python -m trainer compile=off optimizer.lr=0.001 model=small_cnn data.batch_size=64"
    )
    a, b, e = rows["a"], rows["b"], rows["e"]
    assert (a["compile_s"], a["step_ms"], a["cache_hits"], a["cache_misses"]) == (4.0, 2.0, 2, 1)
    assert (b["compiled"], b["compile_s"], b["cache_hits"]) == (False, None, None)
    assert (e["compile_s"], e["step_ms"], e["epochs"]) == (0.0, 3.0, 2)  # running: its last epoch
    assert e["heartbeat_age_s"] is not None and a["heartbeat_age_s"] is None
    json.dumps(view, allow_nan=False)  # plain JSON


def test_the_view_says_who_steered_the_sweep_and_when(sweep_dir):
    assert _view(sweep_dir)["steered"] is None  # nobody has
    store = SweepStore(sweep_dir / "sweep.db")
    store.steer("pause", "s1", "ada@node1", now=0.0)
    store.close()
    assert _view(sweep_dir)["steered"] == "paused by ada@node1 at 1970-01-01 00:00:00 UTC"
    page = (Path(snapshot.__file__).parent / "page.html").read_text()
    assert "sweep.steered" in page  # the summary line shows it beside the state


def test_importance_comes_from_optuna_over_the_finished_runs(sweep_dir):
    found = _view(sweep_dir)["importance"]
    assert found["runs"] == 3 and found["evaluator"] == "fANOVA" and found["reason"] is None
    values = found["objectives"]["val/acc"]
    assert set(values) == {"optimizer.lr", "model"}
    assert sum(values.values()) == pytest.approx(1.0)
    too_few = importances(_view(sweep_dir)["runs"][:2], [{"name": "model", "log": False}], [])
    assert too_few["objectives"] == {} and too_few["reason"] == "the sweep has no metric"
    rows = [r for r in _view(sweep_dir)["runs"] if r["state"] == "finished"][: MIN_RUNS - 1]
    goal = [{"name": "val/acc", "goal": "maximize"}]
    assert (
        "needs 3 finished runs"
        in importances(rows, [{"name": "model", "log": False}], goal)["reason"]
    )


def test_each_chart_is_titled_and_marks_stopped_runs(sweep_dir):
    view = _view(sweep_dir)
    charts = figures.figures(view)
    assert list(charts) == ["curves", "parallel", "importance", "compile"]  # one objective
    titles = {key: fig.layout.title.text for key, fig in charts.items()}
    assert titles["curves"] == "val/acc per epoch, every run"
    assert "Parallel coordinates" in titles["parallel"] and "val/acc" in titles["parallel"]
    assert titles["importance"] == "Parameter importance for val/acc"
    assert "compile time (s) against steady step time (ms)" in titles["compile"]
    lines = {t.name: t for t in charts["curves"].data}
    assert (
        lines["c (stopped)"].line.dash == "dash" and lines["c (stopped)"].marker.symbol[-1] == "x"
    )
    assert lines["e (running)"].line.dash == "dot" and lines["a (finished)"].line.dash == "solid"
    (parcoords,) = charts["parallel"].data
    labels = [d.label for d in parcoords.dimensions]
    assert labels == ["optimizer.lr (log10)", "model", "val/acc"]
    assert list(parcoords.dimensions[1].ticktext) == ["resnet18", "small_cnn"]
    eager = [t for t in charts["compile"].data if t.name == "eager"][0]
    assert list(eager.text) == ["b"] and list(eager.y) == [0.0]
    page = json.loads(figures.page_json(view))
    assert set(page) == {"sweep", "figures"} and set(page["figures"]) == set(charts)


def test_two_objectives_get_a_pareto_front(tmp_path):
    config = {**CONFIG, "method": "custom", "metric": None}
    config["metrics"] = [
        {"name": "val/acc", "goal": "maximize"},
        {"name": "val/loss", "goal": "maximize"},
    ]
    folder = _sweep(tmp_path / "sweeps" / "s1", config)
    view = _view(folder)
    chart = figures.figures(view)["pareto"]
    assert chart.layout.title.text == "Pareto front of val/acc (maximize) and val/loss (maximize)"
    runs, front = chart.data
    assert sorted(runs.text) == ["a", "b", "d"]  # the finished runs
    assert list(front.text) == ["d", "b", "a"]  # none beats another on both: joined by val/acc
    assert set(view["importance"]["objectives"]) == {"val/acc", "val/loss"}


def test_no_run_yet_is_a_titled_chart_that_says_so(tmp_path):
    folder = _sweep(tmp_path / "sweeps" / "s1", runs=[])
    charts = figures.figures(_view(folder))
    for fig in charts.values():
        assert fig.layout.title.text and fig.layout.annotations[0].text


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("only", ["s1", None])
def test_the_server_answers_the_page_and_leaves_the_store_untouched(tmp_path, sweep_dir, only):
    _sweep(tmp_path / "sweeps" / "s2", runs=RUNS[:1])
    before = _digests(tmp_path)
    server = _server(Catalog(tmp_path, None, only), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, page = _get(f"{base}/sweeps/s1")
        assert status == 200 and b"/plotly.min.js" in page
        status, body = _get(f"{base}/api/sweeps/s1")
        data = json.loads(body)
        assert status == 200 and [r["id"] for r in data["sweep"]["runs"]] == list("abedc")
        assert data["sweep"]["state"] == "running" and "curves" in data["figures"]
        listing = json.loads(_get(f"{base}/api/sweeps")[1])
        assert [s["id"] for s in listing["sweeps"]] == (["s1"] if only else ["s1", "s2"])
        assert _get(f"{base}/api/sweeps/s2")[0] == (404 if only else 200)
        assert _get(f"{base}/api/sweeps/..%2Fs1")[0] == 404
        assert _get(f"{base}/nothing")[0] == 404
        status, bundle = _get(f"{base}/plotly.min.js")
        assert status == 200 and len(bundle) > 1_000_000
    finally:
        server.shutdown()
        server.server_close()
        server.RequestHandlerClass.catalog.close()
    assert _digests(tmp_path) == before  # not a byte written, no -wal/-shm left


def test_without_plotly_the_command_says_how_to_install_it(sweep_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError
    with pytest.raises(SystemExit) as stop:
        sweep_cli(["--root", str(sweep_dir.parents[1]), "dashboard", "s1"])
    assert stop.value.code == 2
    assert 'pip install -e ".[dashboard]"' in capsys.readouterr().err


def test_an_unknown_sweep_is_refused_before_serving(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        sweep_cli(["--root", str(tmp_path), "dashboard", "nope", "--port", "0"])
    assert stop.value.code == 2 and "no local sweep 'nope'" in capsys.readouterr().err


def test_a_pbt_sweep_draws_each_members_schedule_with_its_copies():
    from trainer.sweep.report.dashboard.figures import pbt_schedule

    lineage = [
        {"epoch": 0, "params": {"optimizer.lr": 0.01}, "copied_from": None},
        {"epoch": 1, "params": {"optimizer.lr": 0.2}, "copied_from": "b"},
    ]
    view = {
        "method": "pbt",
        "best": "a",
        "parameters": [{"name": "optimizer.lr", "log": True}],
        "runs": [{"id": "a", "lineage": lineage}, {"id": "b", "lineage": lineage[:1]}],
    }
    fig = pbt_schedule(view)
    assert fig.layout.title.text.startswith("PBT schedule: optimizer.lr of each member")
    assert fig.layout.yaxis.type == "log" and [t.name for t in fig.data] == ["a", "b"]
    assert fig.data[0].y == (0.01, 0.2) and fig.data[0].marker.symbol == ("circle", "diamond")
    assert fig.data[0].text == ("kept", "copied b")
    assert pbt_schedule({**view, "method": "random"}) is None
