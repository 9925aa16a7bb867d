"""The machine key of a compile cache: what must match for compiled code to load elsewhere
(torch, Python, Triton, device kind and capability or CPU ISA, C++ compiler), its short id,
and the parts that differ between two keys."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

# The order in which key parts are shown; the id hashes them all.
FIELDS = ("device", "arch", "device_name", "torch", "python", "triton", "cuda", "compiler")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def cpp_compiler() -> str | None:
    """The C++ compiler Inductor builds CPU kernels with ($CXX, else g++; clang++ on macOS)
    and its version, e.g. `g++ 12.2.0`; None when there is none."""
    name = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    path = shutil.which(name)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "-dumpfullversion", "-dumpversion"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.split()
    except OSError:
        return f"{os.path.basename(name)} ?"
    return f"{os.path.basename(name)} {out[0] if out else '?'}"


def machine_key(device: Any) -> dict[str, Any]:
    """The key of compiled code for `device` (a torch.device or its type) on this machine."""
    # lazy: torch costs 1.3 s at start-up; `python -m trainer.cache export` needs none
    import torch

    kind = device if isinstance(device, str) else device.type
    key: dict[str, Any] = {
        "device": kind,
        "torch": torch.__version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "triton": _version("triton"),
    }
    if kind == "cuda":
        index = None if isinstance(device, str) else device.index
        props = torch.cuda.get_device_properties(
            torch.cuda.current_device() if index is None else index
        )
        key["arch"] = f"sm{props.major}{props.minor}"
        key["device_name"] = props.name
        key["cuda"] = torch.version.cuda
    else:
        key["arch"] = f"{platform.machine()}-{torch.backends.cpu.get_cpu_capability().lower()}"
        key["compiler"] = cpp_compiler()
    return {name: key[name] for name in FIELDS if name in key}


def key_id(key: dict[str, Any]) -> str:
    """A short, readable, file- and artifact-safe id: `cpu-x86_64-avx2-torch2.14.1-3f2a9c1b`."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    text = f"{key.get('device')}-{key.get('arch')}-torch{key.get('torch')}-{digest}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """The key parts that differ, as `torch 2.13.0 there, 2.14.1 here`."""
    names = [n for n in FIELDS if n in theirs or n in ours]
    names += sorted((theirs.keys() | ours.keys()) - set(FIELDS))
    return [
        f"{name} {theirs.get(name)} there, {ours.get(name)} here"
        for name in names
        if theirs.get(name) != ours.get(name)
    ]


def describe(key: dict[str, Any]) -> str:
    """One line: `cpu x86_64-avx2, torch 2.14.1, python 3.11, triton 3.8.0, g++ 12.2.0`."""
    parts = [f"{key.get('device')} {key.get('arch')}"]
    parts += [
        f"{n} {key[n]}" for n in ("device_name", "torch", "python", "triton", "cuda") if key.get(n)
    ]
    if key.get("compiler"):
        parts.append(str(key["compiler"]))
    return ", ".join(parts)
