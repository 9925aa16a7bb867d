"""A checkpoint torch.load cannot read: the error says what is wrong with the file, in words."""

from __future__ import annotations

import pytest
import torch

from trainer.config.schema import ConfigError
from trainer.train import checkpoint


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "empty"),
        (b"not a checkpoint", "not written by torch.save"),
        (None, "truncated or damaged torch.save archive"),
    ],
)
def test_unreadable_checkpoint_says_what_is_wrong(tmp_path, content, words):
    path = tmp_path / "last.pt"
    if content is None:
        torch.save({"model": {"w": torch.zeros(1000)}}, path)
        path.write_bytes(path.read_bytes()[:2000])  # a copy cut short
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        checkpoint.load(path, key="checkpoint")
    text = str(err.value)
    assert f"checkpoint={path} is not a readable checkpoint: " in text and words in text
    assert "Error" not in text  # no Python exception quoted
