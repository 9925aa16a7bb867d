"""The Hydra settings typed on a sweep's command line reach every trial, as with Hydra's basic
sweeper; the sweep's own (hydra.sweeper.*, hydra.launcher.*) stay the sweep's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

# A Hydra callback of the user's: each trial that starts writes what it sees.
MARK = """
import json
import os
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback


class Mark(Callback):
    def __init__(self, folder):
        self.folder = Path(folder)

    def on_job_start(self, config, **kwargs):
        hydra = HydraConfig.get()
        seen = {
            "cwd": os.getcwd(),
            "run_dir": hydra.runtime.output_dir,
            "foo": os.environ.get("FOO"),
            "job_logging": hydra.runtime.choices["hydra/job_logging"],
            "overrides": list(hydra.overrides.hydra),
        }
        (self.folder / f"{os.getpid()}.json").write_text(json.dumps(seen))
"""

LAUNCHER = "hydra.launcher._target_=hydra._internal.core_plugins.basic_launcher.BasicLauncher"


@pytest.mark.slow
def test_the_command_lines_hydra_settings_reach_every_trial(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "marks.py").write_text(MARK)
    (tmp_path / "marks").mkdir()
    path = os.pathsep.join(filter(None, [str(tmp_path / "mods"), os.environ.get("PYTHONPATH")]))
    result = run_cli(
        "sweep=lr_random", "hydra.sweeper.run_cap=2", LAUNCHER,
        "compile=off", "logger=none", "trainer.device=cpu", "trainer.max_epochs=1",
        "trainer.max_steps=2",
        "hydra/job_logging=disabled", "hydra.job.chdir=true", "hydra.output_subdir=null",
        "+hydra.job.env_set.FOO='a, b'",
        "+hydra.callbacks.mark._target_=marks.Mark", f"+hydra.callbacks.mark.folder={tmp_path / 'marks'}",
        env={"PYTHONPATH": path},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (directory,) = (tmp_path / "outputs" / "sweeps").iterdir()
    runs = json.loads((directory / "results.json").read_text())["runs"]
    assert len(runs) == 2
    assert all(r["state"] == "finished" and r["metric"] is not None for r in runs)
    seen = [json.loads(p.read_text()) for p in (tmp_path / "marks").iterdir()]
    run_dirs = sorted(str((directory / "runs" / r["id"]).resolve()) for r in runs)
    assert sorted(str(Path(s["run_dir"]).resolve()) for s in seen) == run_dirs  # each trial's
    for trial in seen:
        run_dir = Path(trial["run_dir"])
        assert Path(trial["cwd"]).resolve() == run_dir.resolve()  # hydra.job.chdir=true
        assert trial["foo"] == "a, b"  # hydra.job.env_set, its value as Hydra read it
        assert trial["job_logging"] == "disabled" and not (run_dir / "train.log").exists()
        assert not (run_dir / ".hydra").exists()  # hydra.output_subdir=null
        assert (run_dir / "summary.json").is_file()
        assert not [o for o in trial["overrides"] if o.startswith(("hydra.sweeper", "hydra.la"))]
    command = yaml.safe_load((directory / "sweep.yaml").read_text())["command"]
    assert "hydra.sweeper.run_cap=2" not in command and LAUNCHER not in command
