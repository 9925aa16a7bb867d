"""Data-parallel training under torchrun: the process group, each rank's device, the DDP
wrapper, metric reduction across ranks, an agreed stop and one run directory for all ranks."""

from __future__ import annotations

import atexit
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.config.schema import ConfigError, TrainerConfig
from trainer.hardware.devices import rank_device

log = logging.getLogger(__name__)

RUN_TIME_ENV = "TRAINER_RUN_TIME"  # pins ${now:} of hydra.run.dir/sweep.dir for every rank
_TIMEOUT = timedelta(minutes=10)
_store: Any = None  # the rendezvous store, when agree_run_time() opened it before Hydra


@dataclass
class Dist:
    """Where this process stands: rank 0 of 1 for a single-device run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device | None = None  # the rank's device (ddp only; single resolves its own)
    stop_group: Any = None  # a Gloo group for the per-step stop flag (no GPU sync)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1 or self.device is not None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_world() -> int:
    """WORLD_SIZE as torchrun sets it (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _rendezvous() -> Any:
    """The store torchrun's environment points at (MASTER_ADDR/MASTER_PORT), opened once."""
    global _store
    if _store is None:
        _store, _, _ = next(dist.rendezvous("env://", timeout=_TIMEOUT))
    return _store


def agree_run_time() -> None:
    """Before Hydra composes: give every rank rank 0's clock in TRAINER_RUN_TIME, so that
    `${now:}` in the run directory names one folder for the whole torchrun job."""
    if torchrun_world() <= 1 or os.environ.get(RUN_TIME_ENV):
        return
    store = _rendezvous()
    key = f"trainer/run_time/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if int(os.environ.get("RANK", "0")) == 0:
        store.set(key, datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f"))
    os.environ[RUN_TIME_ENV] = store.get(key).decode()


def check_world(strategy: str) -> None:
    """Under torchrun with several processes, only trainer.strategy=ddp makes sense."""
    world = torchrun_world()
    if strategy != "ddp" and world > 1:
        raise ConfigError(
            f"torchrun started {world} processes (WORLD_SIZE={world}) but "
            f"trainer.strategy={strategy} would train {world} independent copies; add "
            "trainer.strategy=ddp to train one model on all of them."
        )


def refuse_misuse(strategy: str) -> None:
    """Before Hydra runs under torchrun: a strategy other than ddp ends every rank here, so that
    no rank sets up logging or writes a run directory that another removes. The other ranks
    end silently with 0 and rank 0, once they have (torchrun stops every rank at the first
    failure), says why with exit 2."""
    try:
        check_world(strategy)
    except ConfigError:
        store = _rendezvous()
        key = f"trainer/refused/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        if int(os.environ.get("RANK", "0")) != 0:
            store.add(key, 1)
            raise SystemExit(0) from None
        deadline = time.monotonic() + 60
        while store.add(key, 0) < torchrun_world() - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the last rank has exited (torchrun would SIGTERM it) before rank 0
        raise


def setup(cfg: TrainerConfig) -> Dist:
    """Join torchrun's process group for trainer.strategy=ddp (idempotent); else one rank."""
    world = torchrun_world()
    if cfg.strategy == "single":
        check_world(cfg.strategy)
        return Dist()

    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        raise ConfigError(
            "trainer.strategy=ddp needs the environment torchrun provides (RANK, LOCAL_RANK, "
            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT); launch with `torchrun --nproc_per_node=N -m "
            "trainer trainer.strategy=ddp ...`, or use trainer.strategy=single."
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = rank_device(cfg.device, local_rank)
    use_cuda = device.type == "cuda"
    if use_cuda:
        torch.cuda.set_device(device)
    if rank != 0:  # only rank 0 prints progress; other ranks still report warnings
        logging.getLogger().setLevel(logging.WARNING)
    if not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        kwargs: dict[str, Any] = {"backend": backend, "timeout": _TIMEOUT}
        if _store is not None:
            kwargs.update(store=_store, rank=rank, world_size=world)
        else:
            kwargs["init_method"] = "env://"
        if use_cuda:
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
        atexit.register(teardown)
        log.info("process group: %s, rank %d of %d on %s", backend, rank, world, device)
    stop_group = dist.new_group(backend="gloo") if use_cuda else dist.group.WORLD
    return Dist(rank, world, local_rank, device, stop_group)


def teardown() -> None:
    """Leave the process group (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, ctx: Dist) -> nn.Module:
    """Wrap the (already compiled in place) model in DDP; Dynamo's DDP optimizer then splits
    its graphs at DDP's bucket boundaries. A single-device run gets the model back."""
    if not ctx.enabled:
        return model

    device_ids = (
        [ctx.device.index] if ctx.device is not None and ctx.device.type == "cuda" else None
    )
    return DistributedDataParallel(model, device_ids=device_ids)


def reduce_sums(ctx: Dist, values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum of `values` over all ranks (the identity on one rank)."""
    if not ctx.enabled:
        return list(values)

    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def reduce_mean(ctx: Dist, means: dict[str, float], samples: int, device: torch.device):
    """Sample-weighted means over all ranks: ({name: mean}, total samples)."""
    names = list(means)
    sums = reduce_sums(ctx, [means[k] * samples for k in names] + [float(samples)], device)
    total = sums[-1]
    return {k: s / max(total, 1.0) for k, s in zip(names, sums[:-1], strict=True)}, int(total)


def broadcast(ctx: Dist, value: Any) -> Any:
    """Rank 0's `value` (any picklable object), on every rank; the value itself on one rank."""
    if ctx.world_size <= 1:
        return value

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def agree_run_dir(ctx: Dist, out: Path) -> Path:
    """Rank 0's run directory, on every rank."""
    if not ctx.enabled:
        return out

    box = [str(out)]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0])


class AgreedStop:
    """A GracefulStop whose `requested` all ranks agree on: every read all-reduces the signal
    number (0: none) with MAX, on a CPU Gloo group, so all ranks stop after the same step.

    Every rank reads `requested` at the same points of the loop, so the collectives match;
    once a stop is agreed the answer stays without further communication.
    """

    def __init__(self, local: Any, ctx: Dist) -> None:
        self._local = local
        self._ctx = ctx
        self._agreed: int | None = None

    @property
    def signum(self) -> int | None:
        return self._agreed

    @property
    def requested(self) -> bool:
        if self._agreed is not None:
            return True
        if not self._ctx.enabled:
            self._agreed = self._local.signum
            return self._agreed is not None

        flag = torch.tensor([self._local.signum or 0], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._ctx.stop_group)
        self._agreed = int(flag.item()) or None
        return self._agreed is not None
