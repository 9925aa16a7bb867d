"""Device and precision rules: which device `trainer.device` names, for one process or a torchrun rank."""

from __future__ import annotations

import pytest
import torch

from trainer.config.schema import ConfigError
from trainer.hardware import devices

CPU = torch.device("cpu")


# --- devices -------------------------------------------------------------------------------


def test_auto_device_is_the_cpu_without_accelerators(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert devices.resolve_device("auto") == CPU
    with pytest.raises(ConfigError, match=r"trainer.device=cuda:1 .*no CUDA device"):
        devices.resolve_device("cuda:1")
    with pytest.raises(ConfigError, match="eval.device=mps"):
        devices.resolve_device("mps", key="eval.device")


def test_cuda_index_beyond_the_devices_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="only 2 CUDA device"):
        devices.check_device("trainer.device", "cuda:2")
    devices.check_device("trainer.device", "cuda:1")


def test_rank_device_rules(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.rank_device("auto", 1) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="LOCAL_RANK=2"):
        devices.rank_device("cuda", 2)
    with pytest.raises(ConfigError, match="cannot be combined with trainer.strategy=ddp"):
        devices.rank_device("cuda:0", 0)
    with pytest.raises(ConfigError, match="does not support MPS"):
        devices.rank_device("mps", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.rank_device("auto", 3) == CPU


def test_precision_rules():
    assert devices.resolve_precision("32", CPU) is None
    assert devices.resolve_precision("16-mixed", CPU) is torch.float16
    assert devices.grad_scaler("16-mixed", CPU).is_enabled()
    assert not devices.grad_scaler("bf16-mixed", CPU).is_enabled()
