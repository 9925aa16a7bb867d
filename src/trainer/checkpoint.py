"""Checkpoints: one dict (model, optimizer, scheduler, scaler, progress, RNG states, config),
written atomically, with state_dict keys that load into a plain, uncompiled model."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.config import ConfigError

FORMAT_VERSION = 1


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module under compile/DDP wrappers (whose state_dict keys are clean)."""
    while True:
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def clean_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """Strip `_orig_mod.` (torch.compile) and leading `module.` (DDP) so keys match a plain model."""
    cleaned = {}
    for key, value in state.items():
        parts = [p for p in key.split(".") if p != "_orig_mod"]  # compile wrappers, any depth
        while parts and parts[0] == "module":  # DDP / DataParallel wrappers, outermost only
            parts = parts[1:]
        cleaned[".".join(parts)] = value
    return cleaned


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` to `path` atomically: a crash mid-write leaves the old file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save({"format_version": FORMAT_VERSION, **payload}, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: str | Path, *, key: str = "trainer.resume") -> dict[str, Any]:
    """Read a checkpoint; a missing or unreadable file is a ConfigError naming `key`."""
    path = Path(path).expanduser()
    if not path.is_file():
        auto = (
            ", or use trainer.resume=auto inside a run directory" if key == "trainer.resume" else ""
        )
        raise ConfigError(
            f"{key}={path} does not exist; give the path of a checkpoint (e.g. "
            f"<run dir>/checkpoints/last.pt){auto}."
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises many types for truncated or foreign files
        raise ConfigError(
            f"{key}={path} is not a readable checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}); the file is corrupt or "
            "incomplete. Use another checkpoint (best.pt or an older copy)."
        ) from None
    if (
        isinstance(ckpt, dict)
        and "model" not in ckpt
        and all(isinstance(v, torch.Tensor) for v in ckpt.values())
    ):
        ckpt = {"model": ckpt}  # a bare state_dict written by other tools
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise ConfigError(
            f"{key}={path} holds no model state; it is not a checkpoint of a classifier."
        )
    return ckpt


def load_model_state(model: nn.Module, state: dict[str, Any], *, source: str, key: str) -> None:
    """Load a (possibly prefixed) state_dict with strict=True, explaining mismatches."""
    try:
        unwrap(model).load_state_dict(clean_state_dict(state), strict=True)
    except RuntimeError as err:
        detail = " ".join(str(err).split())[:400]
        raise ConfigError(
            f"{key}={source} was written for a different model than the one configured "
            f"({detail}). Select the model it was trained with (model=..., model.name=..., "
            "data=... for the number of classes) or start fresh with trainer.resume=null."
        ) from None
