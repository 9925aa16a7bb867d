"""A sweep directory: made once, under <root>/sweeps/<id>/ or in hydra.sweep.dir (linked from
its id), found by either, and a folder that already holds a sweep refused with that sweep's id,
whether its store is sweep.db or a database server storage.yaml records."""

from __future__ import annotations

import pytest

from trainer.errors import TrainerError
from trainer.sweep.store import directory
from trainer.sweep.store.opening import open_store


def _made(root, sweep_id, where=None) -> directory.SweepLayout:
    layout = directory.create(root, sweep_id, where)
    store = open_store(layout.root, None, sweep_id)
    store.set("sweep_id", sweep_id)
    store.close()
    return layout


def test_a_sweep_is_found_by_its_id_and_by_its_folder(tmp_path):
    root = tmp_path / "outputs"
    layout = _made(root, "abc", tmp_path / "mine")
    assert layout.root == (tmp_path / "mine").resolve() and layout.db.is_file()
    assert directory.SweepLayout.under(root, "abc").root.is_symlink()
    assert directory.find("sweep", "abc", root).root == layout.root
    assert directory.find("sweep", str(layout.root), root).root == layout.root
    assert [sweep_id for sweep_id, _ in directory.known(root)] == ["abc"]
    with pytest.raises(directory.UnknownSweep, match="no local sweep 'nope'"):
        directory.find("sweep", "nope", root)


def test_a_folder_that_holds_a_sweep_is_refused_with_that_sweeps_id(tmp_path):
    held = _made(tmp_path, "abc")
    with pytest.raises(TrainerError, match="already holds sweep abc"):
        directory.create(tmp_path, "new", held.root)
    on_server = directory.SweepLayout(tmp_path / "on-server")
    directory.record_storage(on_server, "postgresql://user@host/db", "xyz")
    assert directory.recorded(on_server.root) == {
        "url": "postgresql://user@host/db",
        "sweep_id": "xyz",
    }
    with pytest.raises(TrainerError, match="already holds sweep xyz"):
        directory.create(tmp_path, "new", on_server.root)
