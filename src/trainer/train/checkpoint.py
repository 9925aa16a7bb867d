"""Checkpoints: one dict (model, optimizer, scheduler, scaler, progress, RNG states, config),
written atomically, with state_dict keys that load into a plain, uncompiled model."""

from __future__ import annotations

import logging
import os
import pickle
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.config.schema import ConfigError
from trainer.train.optim import keep_kernel
from trainer.train.step import Progress

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: RNG states as tensors and plain values (weights_only=True loads it)


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
    """Every RNG state as tensors and plain values, so `torch.load(weights_only=True)` reads it."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`'s output (or the pickled tuples that older checkpoints hold)."""
    py = state["python"]
    if isinstance(py, dict):
        py = (py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss"])
    random.setstate(py)
    numpy = state["numpy"]
    if isinstance(numpy, dict):
        keys = numpy["keys"].numpy().astype(np.uint32)
        numpy = (numpy["kind"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    np.random.set_state(numpy)
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


def _read(path: Path, key: str) -> Any:
    """torch.load with weights_only=True; a checkpoint of an older release (numpy's RNG state
    pickled) is read the old way only for trainer.resume, after saying so."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Unsupported global" not in str(err):  # a corrupt file, not a pickled object
            raise
        if key != "trainer.resume":
            raise ConfigError(
                f"{key}={path} holds pickled Python objects (a checkpoint written by an older "
                "release), which torch.load(weights_only=True) refuses; resume it once with "
                f"trainer.resume={path} to write a new-format checkpoint, then use that one."
            ) from None
    log.warning(
        "%s was written by an older release (numpy's RNG state pickled): loading it with "
        "weights_only=False, once; the checkpoints this run writes load with weights_only=True.",
        path,
    )
    return torch.load(path, map_location="cpu", weights_only=False)


def _what_is_wrong(path: Path) -> str:
    """What is wrong with a checkpoint torch.load could not read, in a user's words."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4)
    if size == 0:
        return "the file is empty (a write that never finished)"
    if head == b"PK\x03\x04":  # torch.save's zip format: the archive is cut short or damaged
        return f"the file ({size:,} bytes) is a truncated or damaged torch.save archive"
    if head[:1] == b"\x80":  # a pickle: torch.save's legacy format, cut short or damaged
        return f"the file ({size:,} bytes) is a damaged or incomplete legacy torch.save file"
    return f"the file ({size:,} bytes) was not written by torch.save (not a checkpoint)"


def load(path: str | Path, *, key: str = "trainer.resume") -> dict[str, Any]:
    """Read a checkpoint; a missing or unreadable file is a ConfigError naming `key`."""
    path = Path(os.path.expandvars(str(path))).expanduser()
    if not path.is_file():
        auto = (
            ", or use trainer.resume=auto inside a run directory" if key == "trainer.resume" else ""
        )
        raise ConfigError(
            f"{key}={path} does not exist; give the path of a checkpoint (e.g. "
            f"<run dir>/checkpoints/last.pt){auto}."
        )
    try:
        ckpt = _read(path, key)
    except ConfigError:
        raise
    except Exception:  # torch raises many types for truncated or foreign files
        raise ConfigError(
            f"{key}={path} is not a readable checkpoint: {_what_is_wrong(path)}. Use "
            "another checkpoint (best.pt, last.pt or an older copy)."
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


@dataclass
class TrainState:
    """What a checkpoint saves and restores: the objects training changes, and what it is of."""

    model: nn.Module  # the plain module (compiled in place: its state_dict keys are clean)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    scaler: torch.amp.GradScaler
    progress: Progress
    model_name: str
    num_classes: int
    sample_shape: tuple[int, ...]
    config: dict[str, Any]  # the resolved run config
    ema: Any = None  # trainer.ema's WeightAverage: saved as `ema`, loads into a plain model
    augment: Any = None  # data.augment's generators: their states go in the checkpoint

    def payload(self) -> dict[str, Any]:
        """The checkpoint dict: tensors and plain values only."""
        extra = {"ema": self.ema.state_dict()} if self.ema is not None else {}
        if self.augment is not None:
            extra["augment_rng"] = self.augment.state_dict()
        return {
            **extra,
            "model": unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": asdict(self.progress),
            "rng": rng_state(),
            "model_name": self.model_name,
            "num_classes": self.num_classes,
            "sample_shape": list(self.sample_shape),
            "config": self.config,
        }

    def save(self, path: Path) -> None:
        save(path, self.payload())

    def restore(self, path: Path, *, is_main: bool = True) -> None:
        """Load `path` (trainer.resume) into every object, RNG states included."""
        state = load(path, key="trainer.resume")
        load_model_state(self.model, state["model"], source=str(path), key="trainer.resume")
        if state.get("optimizer") is not None:
            keep_kernel(self.optimizer, state["optimizer"])
        for name in ("scheduler", "scaler"):
            target = getattr(self, name)
            if target is not None and state.get(name) is not None:
                target.load_state_dict(state[name])
        if self.ema is not None:  # an EMA switched on at resume starts from the weights
            self.ema.load_state_dict(
                state.get("ema") or clean_state_dict(state["model"]), source=str(path)
            )
        if self.augment is not None and "augment_rng" in state:
            self.augment.load_state_dict(state["augment_rng"])
        if "progress" in state:
            self.progress = Progress(**state["progress"])
            if not is_main:  # the saved partial sums are global; rank 0 carries them
                self.progress.partial = {}
        if "rng" in state:
            set_rng_state(state["rng"])
        log.info(
            "resumed from %s in epoch %d, step %d",
            path,
            self.progress.epoch + 1,
            self.progress.step,
        )
