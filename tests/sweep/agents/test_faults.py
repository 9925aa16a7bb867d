"""A local agent and its trial killed with SIGKILL mid-trial (no cluster, no word from either):
the run is lost with its agent, goes back to the sweep, and the sweep's other agent resumes it
from its last.pt; every grid point finishes exactly once and the sweep command exits 0."""

from __future__ import annotations

import json

import pytest

from benchmarks.sweep_faults import POINTS, run_fault

pytestmark = pytest.mark.slow  # a sweep of real trials


def test_sigkill_of_an_agent_and_its_trial_resumes_the_run_on_the_other_agent(tmp_path):
    outcome = run_fault("agent_sigkill", tmp_path)
    assert outcome.ok, outcome.output_tail
    assert "was killed (SIGKILL)" in outcome.output_tail
    victim = outcome.victim
    assert victim["losses"] == 1 and victim["preemptions"] == 0
    assert f"lost: {victim['id']} once" in outcome.output_tail
    (results,) = (tmp_path / "outputs").rglob("results.json")
    runs = json.loads(results.read_text())["runs"]
    assert len(runs) == len(POINTS)  # resumed in place: no second row for the point
    assert all(r["state"] == "finished" for r in runs)
    (entry,) = [r for r in runs if r["id"] == victim["id"]]
    assert entry["losses"] == 1 and entry["retries"] == 1
    assert (results.parent / "sweep.png").is_file()
