"""The sweep's agents as tasks of Hydra's Ray launcher (`hydra/launcher=ray`), on a local Ray
instance the launcher starts; skipped where hydra-ray-launcher is not installed. It needs
cloudpickle<3 and (through botocore) python-dateutil<3, which constraints.txt pins higher: install
it after the project without `-c`, or with those two pins left out."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.plugin.test_launchers import SWEEP, _finished_once

pytest.importorskip(
    "hydra_plugins.hydra_ray_launcher",
    reason="Hydra's Ray launcher is not installed (pip install hydra-ray-launcher)",
)

# A small local Ray: two CPUs whatever the machine has, no dashboard (its processes and port).
SMALL_RAY = [
    "+hydra.launcher.ray.init.num_cpus=2",
    "+hydra.launcher.ray.init.include_dashboard=false",
]


@pytest.mark.slow
def test_ray_runs_each_agent_as_a_ray_task(tmp_path):
    result = run_cli(*SWEEP, "hydra/launcher=ray", *SMALL_RAY, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "agents: 2 ray job(s)" in result.stdout
    _finished_once(tmp_path / "outputs")
    (jobs,) = (tmp_path / "outputs").glob("sweeps/*/agent-jobs")
    assert sorted(p.name for p in jobs.iterdir()) == ["0", "1"]  # Hydra's job dirs
    for num in ("0", "1"):
        hydra_yaml = (jobs / num / ".hydra" / "hydra.yaml").read_text()
        assert "hydra_ray_launcher.ray_launcher.RayLauncher" in hydra_yaml
        assert f"id: job_id_for_{num}" in hydra_yaml  # the job id the Ray launcher gives a job
    # The agents' output reached the terminal through Ray's log forwarding from its workers,
    # each line prefixed with the Ray task that printed it (the launcher's `_run_job`).
    assert "(_run_job pid=" in result.stdout and "agent: starting run" in result.stdout
