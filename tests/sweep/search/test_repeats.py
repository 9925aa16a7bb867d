"""hydra.sweeper.repeats: grouping a sweep's runs by configuration, mean and std, the order of
claims, what the engines are told, the report, and the checks before launch."""

from __future__ import annotations

import io
import os

import pytest

from trainer.sweep.report import leaderboard
from trainer.sweep.search import repeats as rp
from trainer.sweep.search.dispatch import ClassicEngine, sweep_state
from trainer.sweep.search.wandb_sweeps.config.cfg import schema_violations_from_proposed_config
from trainer.sweep.store.database import RunRecord, SweepStore

METRIC = {"name": "val/acc", "goal": "maximize"}
GRID = {
    "method": "grid",
    "metric": METRIC,
    "parameters": {"optimizer.lr": {"values": [0.1, 0.01]}},
    "command": ["${env}", "${interpreter}", "-m", "trainer", "${args_no_hyphens}"],
}


def _store(tmp_path, config, repeats: rp.Repeats | None) -> SweepStore:
    store = SweepStore(tmp_path / "sweep.db")
    store.set("config", config)
    if repeats is not None:
        repeats.record(store)
    return store


def _claim(engine: ClassicEngine):
    return engine.claim(agent_pid=os.getpid(), rerun_crashed=False, stop=lambda: False)


def _end(store: SweepStore, run_id: str, acc: float | None, state: str = "finished") -> None:
    if acc is not None:
        store.add_metrics(run_id, [{"val/acc": acc}], 0)
    store.update(run_id, state=state)


def test_each_grid_point_runs_with_every_seed_before_the_next_point(tmp_path):
    store = _store(tmp_path, GRID, rp.Repeats.of(3, 10))
    engine = ClassicEngine(store, GRID)
    claimed = [_claim(engine) for _ in range(6)]
    got = [(r.params["optimizer.lr"], r.params["trainer.seed"]) for r in claimed]
    assert got == [(0.1, 10), (0.1, 11), (0.1, 12), (0.01, 10), (0.01, 11), (0.01, 12)]
    assert [r.search_info["repeat"] for r in claimed] == [0, 1, 2] * 2
    assert [r.search_info["configuration"] for r in claimed] == [0, 0, 0, 1, 1, 1]
    assert _claim(engine) is None  # two points x three seeds: the grid is done
    for run in claimed:
        _end(store, run.id, 0.5)
    assert sweep_state("finished", store) == "finished"


def test_a_sweep_with_repeats_left_is_not_finished(tmp_path):
    store = _store(tmp_path, GRID, rp.Repeats.of(2, 0))
    engine = ClassicEngine(store, GRID)
    first = _claim(engine)
    _end(store, first.id, 0.5)
    assert sweep_state("stopped", store).startswith("stopped")


def test_run_cap_counts_configurations(tmp_path):
    config = {**GRID, "method": "random", "run_cap": 2}
    store = _store(tmp_path, config, rp.Repeats.of(2, 0))
    engine = ClassicEngine(store, config)
    claimed = [_claim(engine) for _ in range(4)]
    assert all(isinstance(r, RunRecord) for r in claimed)
    assert [r.params["trainer.seed"] for r in claimed] == [0, 1, 0, 1]
    assert claimed[0].params["optimizer.lr"] == claimed[1].params["optimizer.lr"]
    assert _claim(engine) is None  # 2 configurations x 2 seeds


def test_without_repeats_the_claims_are_todays(tmp_path):
    store = _store(tmp_path, GRID, None)
    engine = ClassicEngine(store, GRID)
    claimed = [_claim(engine) for _ in range(2)]
    assert [r.params for r in claimed] == [{"optimizer.lr": 0.1}, {"optimizer.lr": 0.01}]
    assert _claim(engine) is None


def test_mean_and_sample_std():
    assert rp.spread([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert rp.spread([0.5]) == (0.5, 0.0)
    assert rp.spread([]) == (None, None)


def _run(
    run_id, seq, params, state="finished", acc=None, info=None, rerun_of=None, superseded=False
):
    history = [] if acc is None else [{"val/acc": 0.0}, {"val/acc": acc}]
    return RunRecord(
        run_id, seq, state, params, search_info=info, history=history, rerun_of=rerun_of,
        superseded=superseded,
    )  # fmt: skip


def test_the_engine_hears_one_run_per_configuration_with_the_mean_once_all_ended():
    repeats = rp.Repeats.of(2, 0)
    a = {"configuration": 0}
    runs = [
        _run("r1", 1, {"x": 1, "trainer.seed": 0}, acc=0.6, info={**a, "repeat": 0}),
        _run("r2", 2, {"x": 1, "trainer.seed": 1}, acc=0.8, info={**a, "repeat": 1}),
        _run("r3", 3, {"x": 2, "trainer.seed": 0}, acc=0.9, info={"configuration": 1}),
        _run("r4", 4, {"x": 2, "trainer.seed": 1}, state="running", info={"configuration": 1}),
    ]
    told = rp.collapsed(rp.configurations(runs), repeats, METRIC)
    assert [(r.id, r.state, r.params) for r in told] == [
        ("r1", "finished", {"x": 1}),
        ("r3", "running", {"x": 2}),  # one seed still running: nothing told of its result
    ]
    assert told[0].history == [{"val/acc": pytest.approx(0.7)}]
    assert told[1].history == []


def test_the_engine_proposes_from_the_collapsed_runs_and_the_proposal_gets_the_first_seed():
    heard = []

    def engine(runs):
        heard.append([(r.id, r.state, r.history) for r in runs])
        return {"x": 3}, {"why": "bayes"}

    repeats = rp.Repeats.of(2, 5)
    runs = [
        _run("r1", 1, {"x": 1, "trainer.seed": 5}, acc=0.2, info={"configuration": 0}),
        _run("r2", 2, {"x": 1, "trainer.seed": 6}, acc=0.4, info={"configuration": 0}),
    ]
    params, info = rp.proposer(repeats, METRIC, engine)(runs)
    assert heard == [[("r1", "finished", [{"val/acc": pytest.approx(0.3)}])]]
    assert params == {"x": 3, "trainer.seed": 5}
    assert info == {"why": "bayes", "configuration": 1, "repeat": 0}


def test_a_rerun_of_a_crashed_repeat_stays_in_its_configuration():
    runs = [
        _run("r1", 1, {"x": 1, "trainer.seed": 0}, acc=0.5, info={"configuration": 0}),
        _run("r2", 2, {"x": 1, "trainer.seed": 1}, state="crashed", superseded=True,
             info={"configuration": 0, "repeat": 1}),
        _run("r3", 3, {"x": 1, "trainer.seed": 1}, acc=0.7, rerun_of="r2"),
    ]  # fmt: skip
    (group,) = rp.configurations(runs)
    assert [r.id for r in group.runs] == ["r1", "r3"] and group.seeds() == [0, 1]
    assert rp.next_repeat([group], rp.Repeats.of(2, 0)) is None


def test_a_configuration_without_any_value_is_failed_for_the_engine():
    repeats = rp.Repeats.of(2, 0)
    runs = [
        _run("r1", 1, {"x": 1, "trainer.seed": 0}, state="failed", info={"configuration": 0}),
        _run("r2", 2, {"x": 1, "trainer.seed": 1}, state="failed", info={"configuration": 0}),
    ]
    (told,) = rp.collapsed(rp.configurations(runs), repeats, METRIC)
    assert told.state == "failed" and told.history == []


@pytest.mark.parametrize(
    "count, config, wanted",
    [
        (0, GRID, "hydra.sweeper.repeats=0 must be an integer >= 1"),
        (-2, GRID, "hydra.sweeper.repeats=-2 must be an integer >= 1"),
        (True, GRID, "hydra.sweeper.repeats=True must be an integer >= 1"),
        (
            3,
            {**GRID, "parameters": {"trainer.seed": {"values": [1, 2]}}},
            "trainer.seed is also a swept parameter",
        ),
        (2, {**GRID, "early_terminate": {"type": "hyperband", "min_iter": 1}}, "hyperband"),
        (2, {**GRID, "metrics": [METRIC, {"name": "val/loss"}]}, "several objectives"),
    ],
)
def test_bad_repeats_are_refused_with_the_key_and_the_fix(count, config, wanted):
    (problem,) = rp.problems(count, config)
    assert wanted in problem and "hydra.sweeper.repeats" in problem


def test_one_repeat_and_plain_configs_have_no_problem():
    assert rp.problems(1, {**GRID, "parameters": {"trainer.seed": {"values": [1]}}}) == []
    assert rp.problems(4, GRID) == []


def test_the_dry_runs_count_is_configurations_times_seeds():
    assert rp.runs_line(8, rp.Repeats.of(3, 0)) == "8 configurations x 3 seeds = 24 runs"
    assert rp.runs_line("unbounded", rp.Repeats.of(3, 0)) == (
        "unbounded configurations x 3 seeds = unbounded runs"
    )
    assert rp.runs_line(8, None) == "8"


@pytest.mark.parametrize("method", ["grid", "random", "bayes"])
def test_the_w_and_b_server_gets_the_seed_as_a_swept_value_in_a_valid_config(method):
    config = {**GRID, "method": method, "run_cap": 4}
    server = rp.for_server(config, rp.Repeats.of(3, 7))
    assert server["parameters"]["trainer.seed"] == {"values": [7, 8, 9]}
    assert server["parameters"]["optimizer.lr"] == GRID["parameters"]["optimizer.lr"]
    assert server["run_cap"] == 12  # the server counts runs
    assert "trainer.seed" not in config["parameters"]  # the local config is left as it was
    assert schema_violations_from_proposed_config(server) == []
    note = rp.server_note(config, rp.Repeats.of(3, 7))
    assert ("every point" in note) == (method == "grid")


def _finished_sweep(tmp_path) -> SweepStore:
    store = _store(tmp_path, GRID, rp.Repeats.of(3, 0))
    engine = ClassicEngine(store, GRID)
    values = [0.5, 0.7, 0.6, 0.9, 0.2, 0.4]  # lr 0.1: mean 0.6 std 0.1; lr 0.01: 0.5, 0.361
    for acc in values:
        _end(store, _claim(engine).id, acc)
    return store


def test_results_rank_configurations_by_mean_and_keep_every_run(tmp_path):
    store = _finished_sweep(tmp_path)
    res = leaderboard.results(store, "s1")
    assert len(res["runs"]) == 6 and res["repeats"] == {"count": 3, "seeds": [0, 1, 2]}
    first, second = res["configurations"]
    assert first["params"] == {"optimizer.lr": 0.1} and second["params"] == {"optimizer.lr": 0.01}
    assert first["metric"] == pytest.approx(0.6) and first["std"] == pytest.approx(0.1)
    assert second["metric"] == pytest.approx(0.5) and second["n"] == 3
    assert first["seeds"] == [0, 1, 2] and len(first["runs"]) == 3
    assert res["best"] is first
    # the best single run (0.9) is of the configuration with the lower mean
    assert res["runs"][0]["metric"] == 0.9
    text = leaderboard._best_text(GRID, "s1", res)
    assert "optimizer.lr=0.1" in text and "trainer.seed" not in text
    assert "Best configuration" in text


def test_the_leaderboard_of_configurations_fits_80_columns_and_says_how_it_ranks(tmp_path):
    from rich.console import Console

    res = leaderboard.results(_finished_sweep(tmp_path), "s1")
    out = io.StringIO()
    leaderboard.print_leaderboard(res, Console(file=out, width=80))
    text = out.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "val/acc mean" in text and "± std" in text
    assert "ranked by mean ± std of val/acc over 3 seeds" in text
    assert "best: " in text and "0.6 ± 0.1 (n=3)" in text


def test_an_optuna_sweep_hands_out_each_suggestion_with_every_seed_then_asks_again(tmp_path):
    pytest.importorskip("optuna")
    from trainer.sweep.search.suggest.driver import SchedulerEngine
    from trainer.sweep.store.directory import SweepLayout

    config = {
        "method": "custom",
        "metric": METRIC,
        "run_cap": 2,
        "scheduler": {"engine": "optuna"},
        "parameters": {"optimizer.lr": {"distribution": "uniform", "min": 0.01, "max": 0.1}},
    }
    store = _store(tmp_path, config, rp.Repeats.of(2, 4))
    engine = SchedulerEngine(store, SweepLayout(tmp_path), config, "s1")
    try:
        claim = lambda: engine.claim(agent_pid=os.getpid(), rerun_crashed=False, stop=lambda: False)  # noqa: E731
        first, second = claim(), claim()
        assert first.params["optimizer.lr"] == second.params["optimizer.lr"]
        assert [first.params["trainer.seed"], second.params["trainer.seed"]] == [4, 5]
        _end(store, first.id, 0.2)
        _end(store, second.id, 0.4)
        third, fourth = claim(), claim()
        assert third.params["optimizer.lr"] == fourth.params["optimizer.lr"]
        assert third.params["optimizer.lr"] != first.params["optimizer.lr"]
        assert [third.params["trainer.seed"], fourth.params["trainer.seed"]] == [4, 5]
        _end(store, third.id, 0.6)
        _end(store, fourth.id, 0.8)
        assert claim() is None  # run_cap 2 counts configurations
        study = engine.driver.session._optimizer.study
        values = sorted(t.value for t in study.trials if t.value is not None)
        assert values == [pytest.approx(0.3), pytest.approx(0.7)]  # one mean per configuration
    finally:
        engine.close()


def test_a_resumed_sweep_refuses_other_repeats_and_keeps_its_own(tmp_path):
    from trainer.config.rules import ConfigError
    from trainer.sweep.local import _same_repeats

    store = _store(tmp_path, GRID, rp.Repeats.of(2, 0))
    _same_repeats("s1", store, None)  # resumed without the key: the sweep's own repeats
    _same_repeats("s1", store, rp.Repeats.of(2, 0))
    with pytest.raises(ConfigError, match=r"hydra.sweeper.repeats=3 .* differs from sweep s1's 2"):
        _same_repeats("s1", store, rp.Repeats.of(3, 0))
    with pytest.raises(ConfigError, match="differs from sweep s2's 1"):
        _same_repeats("s2", _store(tmp_path / "b", GRID, None), rp.Repeats.of(2, 0))
