"""A run's workload: what shapes its compiled graphs (architecture, input shape, compile
settings, precision), read from its config alone, so the sweeper can tell distinct workloads
apart before anything is built. Two configs with one workload compile the same graphs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from trainer.config.schema import TrainConfig

# compile.* keys that change what is compiled (cache_dir, explain, trace, ... do not).
_COMPILE_KEYS = ("mode", "backend", "backend_module", "dynamic", "fullgraph", "options")
_COMPILE_KEYS += ("target", "optimizer")


def workload(conf: TrainConfig) -> dict[str, Any]:
    """The workload of a validated config, as plain values."""
    data = conf.data
    shape: dict[str, Any] = {
        "data": data.name,
        "batch_size": data.batch_size,
        "eval_batch_size": data.eval_batch_size,
    }
    if data.name == "fake":
        shape.update(image_shape=list(data.image_shape), num_classes=data.num_classes)
    elif data.name == "imagefolder":  # its classes (the model's head) come from the folder
        shape["root"] = data.root
    described: dict[str, Any] = {
        "model": asdict(conf.model),
        "input": shape,
        "compile": {k: getattr(conf.compile, k) for k in _COMPILE_KEYS},
        "trainer": {k: getattr(conf.trainer, k) for k in ("device", "precision", "strategy")},
    }
    if conf.compile.optimizer:  # the compiled update bakes in every setting but the lr tensor
        described["optimizer"] = {k: v for k, v in asdict(conf.optimizer).items() if k != "lr"}
    return json.loads(json.dumps(described, sort_keys=True, default=str))


def workload_id(described: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]


def label(described: dict[str, Any]) -> str:
    """One line for people: `small_cnn width 32 on digits, batch 64, inductor default`."""
    model, shape, comp = described["model"], described["input"], described["compile"]
    name = model["name"] + (f" width {model['width']}" if model["name"] == "small_cnn" else "")
    size = f" {model['image_size']}px" if model.get("image_size") else ""
    how = comp["backend"] + (f" {comp['mode']}" if comp["backend"] == "inductor" else "")
    extra = [f"target={comp['target']}"] * (comp["target"] != "model")
    extra += ["optimizer"] * bool(comp["optimizer"])
    extra += [described["trainer"]["precision"]] * (described["trainer"]["precision"] != "32")
    return f"{name}{size} on {shape['data']}, batch {shape['batch_size']}, {how}" + "".join(
        f", {e}" for e in extra
    )
