"""The bayes quality benchmark runs end to end with tiny arguments and writes its table."""

from __future__ import annotations

import json

from benchmarks import bayes_parity


def test_bayes_benchmark_writes_table_and_json(tmp_path):
    results = bayes_parity.main(
        ["--engines", "ours", "--seeds", "2", "--budget", "3", "--out", str(tmp_path)]
    )
    labels = list(results)
    assert labels[0].startswith("bayes ours (numpy ") and labels[1].startswith("random ours")
    for cells in results.values():
        assert set(cells) == set(bayes_parity.PROBLEMS)
        for cell in cells.values():
            assert len(cell["runs_to_region"]) == 2
            assert all(r is None or 1 <= r <= 3 for r in cell["runs_to_region"])
    table = (tmp_path / "bayes_parity.md").read_text()
    assert "| quadratic_1d | bayes ours" in table and "| median runs |" in table
    assert json.loads((tmp_path / "bayes_parity.json").read_text()) == results


def test_a_region_hit_stops_the_count():
    problem = bayes_parity.Problem(
        {"x": {"distribution": "uniform", "min": 0.0, "max": 1.0}}, lambda p: 0.0, 0.5, "always"
    )
    assert bayes_parity.runs_to_region("ours", "bayes", problem, seed=0, budget=5) == (1, 0.0)
