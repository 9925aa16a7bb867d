"""benchmarks/sweep_peers.py end to end with tiny arguments (our sweeper only: Hydra's Optuna
sweeper is installed for the benchmark only, with --no-deps)."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import pytest

from benchmarks import destination, sweep_peers
from trainer.sweep.agents import cpu_share


@pytest.mark.slow
def test_sweep_peers_times_our_sweeps_and_writes_results(tmp_path):
    """One agent (two agents' sweeps cost a minute more here: their accounting is the fast
    test below, their CPU split tests/sweep/agents/test_cpu_slots.py)."""
    args = ["--sweepers", "ours", "--trials", "2", "--epochs", "1", "--rounds", "1"]
    args += ["--compile", "off", "--agents", "1", "--out", str(tmp_path), "--short-trials", "2"]
    args += ["--short-steps", "5"]
    variants, shorts = sweep_peers.main(args)
    assert [v.name for v in variants] == ["ours-1"]
    (one,) = variants
    assert len(one.walls) == 1 and len(one.step_ms) == 2
    assert set(one.threads) == {cpu_share.process_limits().count}
    table = (tmp_path / "sweep_peers.md").read_text()
    assert "| ours-1 | off | 1 |" in table
    saved = json.loads((tmp_path / "sweep_peers.json").read_text())
    assert [v["name"] for v in saved["variants"]] == ["ours-1"]
    # 1-second trials: each slot's seconds are accounted for, part by part
    assert [s.name for s in shorts] == ["ours-1"]
    (parts,) = shorts[0].parts
    assert sum(parts.values()) == pytest.approx(shorts[0].span_s[0] / 2)
    assert parts["idle slot"] >= -1e-6 and shorts[0].own_s[0] > 0
    assert "## 1-second trials" in table and "| trial: start-up |" in table
    assert "| Hydra: compose |" in table and "| exit |" in table  # benchmarks.trial_phases
    assert [s["name"] for s in saved["one_second_trials"]] == ["ours-1"]


def test_two_agents_slot_seconds_add_up_part_by_part():
    """our_parts on two agents' runs: every part per trial per slot, the gaps between an
    agent's runs its loop's, what no run covers (start, drain) the idle slots'."""

    def run(pid, created, started, loop, wall, ended):
        perf = {"loop_started_at": loop, "wall_s": wall}
        return SimpleNamespace(
            agent_pid=pid, created_at=created, started_at=started, ended_at=ended,
            summary={"perf": perf},
        )  # fmt: skip

    runs = [run(1, 0.0, 0.1, 0.4, 1.0, 1.5), run(2, 0.5, 0.6, 0.9, 1.0, 2.0)]
    runs += [run(1, 1.6, 1.7, 2.0, 1.0, 3.1)]
    span, own, parts = sweep_peers.our_parts(SimpleNamespace(runs=lambda: runs), 2)
    assert span == pytest.approx(3.1) and own == pytest.approx(1.0)
    assert parts["agent: hand-out to trial process"] == pytest.approx(0.1)
    assert parts["trial: start-up"] == pytest.approx(0.3)
    assert parts["trial: exit to recorded"] == pytest.approx((0.1 + 0.1 + 0.1) / 3)
    assert parts["agent: recorded to next hand-out"] == pytest.approx(0.1 / 3)
    assert sum(parts.values()) == pytest.approx(3.1 * 2 / 3)
    assert parts["idle slot"] == pytest.approx(3.1 * 2 / 3 - 0.1 - 0.3 - 1.0 - 0.1 - 0.1 / 3)


def test_a_reduced_run_writes_nothing_unless_told(tmp_path, monkeypatch):
    monkeypatch.setattr(destination, "PUBLISHED", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sweep_peers, "measure", lambda v, *a: (v.walls.append(1.0), v.best.append(0.5))
    )
    monkeypatch.setattr(
        sweep_peers,
        "measure_short",
        lambda v, *a: (v.span_s.append(3.0), v.own_s.append(1.0), v.overhead_s.append(0.5)),
    )
    monkeypatch.setattr(sweep_peers, "trial_phases", lambda steps: {"exit": 0.1})
    sweep_peers.main(["--sweepers", "ours", "--trials", "2", "--compile", "off"])
    assert not (tmp_path / "results").exists()
    assert (tmp_path / "outputs" / "benchmarks" / "sweep_peers.md").is_file()  # scratch only
    with pytest.raises(SystemExit, match="needs the full run"):
        sweep_peers.main(["--sweepers", "ours", "--trials", "2", "--publish"])


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None,
    reason="Hydra's Optuna sweeper is installed",
)
def test_without_hydras_optuna_sweeper_the_optuna_side_is_one_clear_error():
    with pytest.raises(SystemExit, match=r"pip install --no-deps hydra-optuna-sweeper==1\.3\.0"):
        sweep_peers.main(["--trials", "1"])
