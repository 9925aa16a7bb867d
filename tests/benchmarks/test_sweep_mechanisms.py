"""benchmarks/sweep_mechanisms.py end to end in its smallest configuration: one trial per sweep,
one round of the watcher pair, a few steps, compile off."""

from __future__ import annotations

import json

import pytest

from benchmarks import sweep_mechanisms

SMALLEST = ["--trials", "1", "--epochs", "1", "--max-steps", "2", "--samples", "128"]
SMALLEST += ["--width", "4"]
SMALLEST += ["--watcher-rounds", "1", "--watcher-steps", "3", "--compile", "off"]


@pytest.mark.slow
def test_sweep_mechanisms_writes_its_two_sections(tmp_path):
    doc = sweep_mechanisms.main([*SMALLEST, "--out", str(tmp_path)])
    text = (tmp_path / "sweep_mechanisms.md").read_text()
    assert [text.count(section) for section in sweep_mechanisms.SECTIONS] == [1, 1]
    assert text.index("## Trial template") < text.index("## Compile-cache watcher")
    assert "Load average" in text and "Saving per trial start" in text
    runs = doc["template"]["runs"]
    assert [r["state"] for mode in ("template", "process") for r in runs[mode]["rows"]] == [
        "finished",
        "finished",
    ]
    assert runs["template"]["templates"] == 1 and runs["process"]["templates"] == 0
    saved = json.loads((tmp_path / "sweep_mechanisms.json").read_text())
    assert set(saved) >= {"machine", "load", "template", "watcher"}
    assert len(saved["load"]["start"]) == 3 and saved["watcher"]["summary"]["hook"]["step_ms"] > 0
