"""Files written atomically (results.json, best.yaml, sweep.yaml, summary.json) get the
permissions a plain write would: 0666 less the umask."""

from __future__ import annotations

import os
import stat

import pytest

from trainer.outputs.layout import write_text_atomic


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_an_atomic_file_gets_the_mode_of_a_plain_write(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "results.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == mode
    assert (tmp_path / "results.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
