"""Device and precision rules, in one place: which device `trainer.device` names (for one
process or for a torchrun rank), whether it exists, and what autocast and GradScaler it gets."""

from __future__ import annotations

import torch

from trainer.config.schema import ConfigError


def check_device(key: str, want: str) -> None:
    """Raise unless `want` (auto | cpu | cuda | cuda:N | mps) exists on this machine."""
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{key}={want} but torch sees no CUDA device (torch.cuda.is_available() is "
                f"False); use {key}=auto or {key}=cpu."
            )
        index = int(want.split(":")[1]) if ":" in want else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"{key}={want} but only {torch.cuda.device_count()} CUDA device(s) exist; use "
                f"cuda:0 ... or {key}=auto."
            )
    if want == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}=mps but MPS is not available; use {key}=auto.")


def resolve_device(want: str, *, key: str = "trainer.device") -> torch.device:
    """The device `want` names; `auto` picks CUDA, then MPS, then the CPU."""
    if want == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    check_device(key, want)
    return torch.device(want)


def rank_device(want: str, local_rank: int) -> torch.device:
    """The device of one torchrun rank under trainer.strategy=ddp: cuda:LOCAL_RANK when CUDA is
    wanted and present, else the CPU."""
    base = want.split(":")[0]
    if ":" in want:
        raise ConfigError(
            f"trainer.device={want} cannot be combined with trainer.strategy=ddp: each rank uses "
            "cuda:LOCAL_RANK; use trainer.device=auto or cuda (restrict the GPUs with "
            "CUDA_VISIBLE_DEVICES)."
        )
    if base == "mps":
        raise ConfigError("trainer.strategy=ddp does not support MPS; use trainer.device=cpu.")
    if base == "cuda":
        check_device("trainer.device", want)
    if base in ("auto", "cuda") and torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} CUDA "
                "device(s); start at most that many processes per node (--nproc_per_node)."
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(
    precision: str, device: torch.device, *, key: str = "trainer.precision"
) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device` (None: full fp32, no autocast)."""
    if precision == "32":
        return None
    if precision == "bf16-mixed":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"{key}=bf16-mixed but {torch.cuda.get_device_name(device)} cannot compute in "
                f"bfloat16; use {key}=16-mixed or {key}=32."
            )
        return torch.bfloat16
    return torch.float16


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A GradScaler that scales only under 16-mixed (fp16 gradients underflow; bf16 do not)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so wall-clock timings include it (a CPU-GPU sync point)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
