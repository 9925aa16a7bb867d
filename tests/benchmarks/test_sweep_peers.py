"""benchmarks/sweep_peers.py end to end with tiny arguments (our sweeper only: Hydra's Optuna
sweeper is installed for the benchmark only, with --no-deps)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks import destination, sweep_peers
from trainer.sweep.agents import cpu_share


@pytest.mark.slow
def test_sweep_peers_times_one_and_parallel_agents_and_writes_results(tmp_path):
    args = ["--sweepers", "ours", "--trials", "2", "--epochs", "1", "--rounds", "1"]
    args += ["--compile", "off", "--agents", "2", "--out", str(tmp_path), "--short-trials", "2"]
    args += ["--short-steps", "5"]
    variants, shorts = sweep_peers.main(args)
    assert [v.name for v in variants] == ["ours-1", "ours-2"]
    one, two = variants
    assert len(one.walls) == len(two.walls) == 1 and len(two.step_ms) == 2
    assert set(one.threads) == {cpu_share.process_limits().count}
    assert set(two.threads) == {max(1, cpu_share.process_limits().count // 2)}
    table = (tmp_path / "sweep_peers.md").read_text()
    assert "| ours-2 | off | 2 |" in table and "agents are" in table
    saved = json.loads((tmp_path / "sweep_peers.json").read_text())
    assert [v["name"] for v in saved["variants"]] == ["ours-1", "ours-2"]
    # 1-second trials: each slot's seconds are accounted for, part by part
    assert [s.name for s in shorts] == ["ours-1", "ours-2"]
    for short in shorts:
        (parts,) = short.parts
        assert sum(parts.values()) == pytest.approx(short.span_s[0] * short.concurrent / 2)
        assert parts["idle slot"] >= -1e-6 and short.own_s[0] > 0
    assert "## 1-second trials" in table and "| trial: start-up |" in table
    assert "| Hydra: compose |" in table and "| exit |" in table  # benchmarks.trial_phases
    assert [s["name"] for s in saved["one_second_trials"]] == ["ours-1", "ours-2"]


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
