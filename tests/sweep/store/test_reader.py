"""A reader's store (the dashboard's): it sees what writers commit, cannot write, and leaves a
finished sweep's directory byte-identical, without even SQLite's -wal and -shm files."""

from __future__ import annotations

import hashlib
import os

import pytest
from sqlalchemy.exc import OperationalError

from trainer.errors import TrainerError
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_reader


def _files(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _sweep(folder) -> SweepStore:
    store = SweepStore(folder / "sweep.db")
    store.set("config", {"method": "grid"})
    store.claim(lambda runs: ({"a": 1}, None), new_id=lambda: "r1", agent_pid=os.getpid())
    store.add_metrics("r1", [{"epoch": 1, "val/acc": 0.5}], 0)
    return store


def test_a_reader_leaves_a_finished_sweep_byte_identical(tmp_path):
    _sweep(tmp_path).close()
    before = _files(tmp_path)
    reader = open_reader(tmp_path)
    assert reader.config == {"method": "grid"}
    assert [r.history for r in reader.runs()] == [[{"epoch": 1, "val/acc": 0.5}]]
    with pytest.raises(OperationalError, match="readonly"):
        reader.update("r1", state="finished")
    reader.close()
    assert _files(tmp_path) == before


def test_a_reader_sees_a_running_sweeps_new_epochs(tmp_path):
    writer = _sweep(tmp_path)
    reader = open_reader(tmp_path)
    assert len(reader.run("r1").history) == 1
    writer.add_metrics("r1", [{"epoch": 2, "val/acc": 0.6}], 1)
    assert len(reader.run("r1").history) == 2
    reader.close()
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.db"]


def test_a_reader_creates_nothing_where_there_is_no_sweep(tmp_path):
    with pytest.raises(TrainerError, match="no sweep.db"):
        open_reader(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
