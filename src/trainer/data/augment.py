"""`data.augment` on batches already on the training device: per-sample random crops, flips and
erasing drawn from seeded generators whose states go into the checkpoint, and torchvision's
RandAugment (transforms v2, on batched uint8 tensors) per group of samples."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.transforms import v2

log = logging.getLogger(__name__)

# Geometric policy of data.augment=standard (and under strong) per data set.
GEOMETRY = {
    "cifar10": "crop",
    "fake": "crop",
    "fashion_mnist": "crop",
    "imagefolder": "resized_crop",
    "mnist": "none",  # digits are not mirror images of each other
    "digits": "none",
}
GROUP = 8  # samples that share one RandAugment draw (v2 draws one op set per call)
ERASE_P = 0.25  # strong: chance that a sample gets one erased rectangle


@dataclass
class Draw:
    """One batch's random parameters, for this rank's samples of the global batch."""

    crop: torch.Tensor  # (B, 2) integer offsets, or (B, 5) uniform numbers for resized_crop
    flip: torch.Tensor  # (B,) bool
    erase: torch.Tensor  # (B, 5) uniform numbers
    seeds: list[int]  # RandAugment seed of each group of GROUP local samples


class Augment:
    """Random training-batch augmentation for one data set and level (standard | strong).

    Parameters are drawn for the whole global batch and each rank takes its samples' share
    (rank r holds global positions r, r + world, ...), so a sample is augmented alike at any
    world size, every rank's generators stay in step, and rank 0's checkpoint restores all."""

    def __init__(
        self, dataset: str, level: str, *, seed: int, device: torch.device, rank: int = 0,
        world_size: int = 1,
    ) -> None:  # fmt: skip
        self.geometry = GEOMETRY.get(dataset, "none")
        self.strong = level == "strong"
        self.rank, self.world = rank, world_size
        self.device = device
        self.device_rng = torch.Generator(device=device).manual_seed(seed)
        self.host_rng = torch.Generator().manual_seed(seed)
        self._rand_augment = None
        if self.strong:
            self._rand_augment = v2.RandAugment(num_ops=2, magnitude=9)

    @property
    def ops(self) -> list[str]:
        """What this augmentation does, in order (summary.json)."""
        ops = ["rand_augment(2 ops, magnitude 9)"] if self.strong else []
        ops += {"crop": ["random_crop(pad 1/8)", "hflip"], "resized_crop": [
            "random_resized_crop(0.08-1)", "hflip"], "none": []}[self.geometry]  # fmt: skip
        return ops + ([f"random_erasing(p={ERASE_P})"] if self.strong else [])

    def draw(self, local_batch: int) -> Draw:
        """Draw every parameter of one batch, the same amount whatever the policy, so the
        generators advance alike on every rank."""
        g, n, d = self.device_rng, local_batch * self.world, self.device
        share = slice(self.rank, None, self.world)
        crop = torch.rand(n, 5, generator=g, device=d)[share]
        flip = (torch.rand(n, generator=g, device=d) < 0.5)[share]
        erase = torch.rand(n, 5, generator=g, device=d)[share]
        groups = math.ceil(local_batch / GROUP)
        seeds = torch.randint(0, 2**62, (groups * self.world,), generator=self.host_rng)
        mine = seeds[self.rank * groups : (self.rank + 1) * groups].tolist()  # host: no sync
        return Draw(crop, flip, erase, mine)

    def on_uint8(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        """strong: RandAugment, one draw per group of GROUP samples (seeded from host_rng)."""
        if self._rand_augment is None:
            return x
        parts = []
        for i, seed in enumerate(draw.seeds):
            with torch.random.fork_rng(devices=[]):  # v2 draws from the global CPU generator
                torch.manual_seed(seed)
                parts.append(self._rand_augment(x[i * GROUP : (i + 1) * GROUP]))
        return torch.cat(parts)

    def on_float(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        """The geometric policy on float pixels (before normalisation)."""
        if self.geometry == "crop":
            return crop_flip(x, draw.crop, draw.flip)
        if self.geometry == "resized_crop":
            return resized_crop_flip(x, draw.crop, draw.flip)
        return x

    def on_normalised(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        """strong: random erasing (to 0, the mean) of one rectangle in ERASE_P of the samples."""
        return erase(x, draw.erase) if self.strong else x

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"device_rng": self.device_rng.get_state(), "host_rng": self.host_rng.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.host_rng.set_state(state["host_rng"])
        try:
            self.device_rng.set_state(state["device_rng"])
        except RuntimeError:  # a checkpoint of another device type: its generator differs
            log.warning(
                "the checkpoint's augmentation generator is of another device type; "
                "augmentation continues from a fresh seed (the run is not bit-exact)."
            )


def crop_flip(x: torch.Tensor, u: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Per sample: pad by 1/8 of the side with zeros, crop back to size at a random offset
    (u[:, :2] uniform in [0, 1)), mirror where `flip`; one gather, no loop."""
    b, _, h, w = x.shape
    pad = max(1, round(min(h, w) / 8))
    offsets = (u[:, :2] * (2 * pad + 1)).long().clamp_(max=2 * pad)
    rows = offsets[:, :1] + torch.arange(h, device=x.device)
    cols = torch.arange(w, device=x.device)
    cols = torch.where(flip[:, None], (w - 1) - cols, cols) + offsets[:, 1:]
    padded = F.pad(x, (pad, pad, pad, pad))
    batch = torch.arange(b, device=x.device)[:, None, None]
    return padded[batch, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


def resized_crop_flip(x: torch.Tensor, u: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Per sample: a crop of 8-100 % of the area with aspect ratio 3/4-4/3 at a random place,
    resized back to the full size (bilinear), mirrored where `flip`; one grid_sample."""
    area = 0.08 + 0.92 * u[:, 0]
    ratio = torch.exp(math.log(3 / 4) + math.log(16 / 9) * u[:, 1])
    cw, ch = (area * ratio).sqrt().clamp(max=1.0), (area / ratio).sqrt().clamp(max=1.0)
    cx, cy = (2 * u[:, 2] - 1) * (1 - cw), (2 * u[:, 3] - 1) * (1 - ch)
    zero = torch.zeros_like(cw)
    theta = torch.stack(
        [torch.stack([torch.where(flip, -cw, cw), zero, cx], 1), torch.stack([zero, ch, cy], 1)],
        1,
    )
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def erase(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per sample, with chance ERASE_P: zero one rectangle of 2-33 % of the area, aspect ratio
    0.3-3.3, at a random place (torchvision's RandomErasing, drawn per sample)."""
    _, _, h, w = x.shape
    area = 0.02 + 0.31 * u[:, 1]
    ratio = torch.exp(math.log(0.3) + math.log(11.0) * u[:, 2])
    eh = ((area * ratio).sqrt() * h).clamp(1, h)
    ew = ((area / ratio).sqrt() * w).clamp(1, w)
    top, left = u[:, 3] * (h - eh), u[:, 4] * (w - ew)
    rows = torch.arange(h, device=x.device)[None, :, None]
    cols = torch.arange(w, device=x.device)[None, None, :]
    inside = (rows >= top[:, None, None]) & (rows < (top + eh)[:, None, None])
    inside = inside & (cols >= left[:, None, None]) & (cols < (left + ew)[:, None, None])
    mask = inside & (u[:, 0] < ERASE_P)[:, None, None]
    return x.masked_fill(mask[:, None], 0.0)
