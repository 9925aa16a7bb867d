"""Read the records of an offline W&B run file (`run-<id>.wandb`) without a W&B server.

The file is W&B's header followed by a LevelDB-style log: 32 KiB blocks of chunks, each with a
7-byte header (CRC32C, length, type FULL/FIRST/MIDDLE/LAST), holding protobuf `Record`s.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def records(path: str | Path):
    data = Path(path).read_bytes()
    start = data.index(b":W&B") + 7  # magic (4), version (2), magic byte (1)
    pos, chunks = start, []
    while pos + _HEADER <= len(data):
        block_left = _BLOCK - (pos % _BLOCK)  # blocks count from the start of the file
        if block_left < _HEADER:
            pos += block_left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if length == 0 and kind == 0:
            pos += block_left
            continue
        payload = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (_FULL, _FIRST):
            chunks = [payload]
        else:
            chunks.append(payload)
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            yield record


def run_config(path: str | Path) -> dict[str, Any]:
    """The run's config as W&B recorded it (run record plus later config updates)."""
    config: dict[str, Any] = {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        items = (
            record.run.config.update
            if kind == "run"
            else record.config.update
            if kind == "config"
            else []
        )
        for item in items:
            config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return config


def run_history(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
            )
    return rows


def run_metrics(path: str | Path) -> dict[str, str]:
    """The run's `define_metric` declarations: metric name or glob → its step metric."""
    declared = {}
    for record in records(path):
        if record.WhichOneof("record_type") == "metric":
            metric = record.metric
            declared[metric.name or metric.glob_name] = metric.step_metric
    return declared
