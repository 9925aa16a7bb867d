"""`trainer.ema`: an exponential moving average of the model's weights (parameters and
buffers), updated after every optimizer step without a host-device sync, evaluated by swapping
it into the (compiled) model in place, and checkpointed beside the model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from trainer.config.schema import ConfigError


class WeightAverage:
    """EMA of every state_dict tensor of `model` (the plain module). Early steps use a smaller
    decay, min(decay, (1 + step) / (10 + step)), so the average is not stuck at the random
    initial weights; integer buffers (BatchNorm's batch count) are copied."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.live = dict(model.state_dict(keep_vars=True))  # the model's own tensors
        self.average = {k: v.detach().clone() for k, v in self.live.items()}
        floats = [k for k, v in self.live.items() if v.is_floating_point()]
        self._floats = ([self.average[k] for k in floats], [self.live[k].detach() for k in floats])
        self._others = [(self.average[k], self.live[k]) for k in self.live if k not in floats]

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Fold the model's current weights in; `step` is the optimizer steps taken so far."""
        decay = min(self.decay, (1 + step) / (10 + step))  # host arithmetic: no device sync
        if self._floats[0]:
            get_ema_multi_avg_fn(decay)(*self._floats, None)
        for average, live in self._others:
            average.copy_(live)

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """Inside, the model's tensors hold the average (copied in place, so a compiled model
        and its CUDA graphs keep their inputs); its own weights are back afterwards."""
        with torch.no_grad():
            saved = {k: v.detach().clone() for k, v in self.live.items()}
            for key, tensor in self.live.items():
                tensor.copy_(self.average[key])
        try:
            yield
        finally:
            with torch.no_grad():
                for key, tensor in self.live.items():
                    tensor.copy_(saved[key])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The average with the model's state_dict keys: it loads into a plain model."""
        return dict(self.average)

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, torch.Tensor], *, source: str) -> None:
        missing = sorted(set(self.average) - set(state))
        if missing:
            raise ConfigError(
                f"trainer.resume={source} holds an EMA of another model (missing "
                f"{', '.join(missing[:3])}); resume with the model it was trained with, or "
                "without trainer.ema."
            )
        for key, tensor in self.average.items():
            tensor.copy_(state[key])


def maybe_average(model: nn.Module, decay: float | None) -> WeightAverage | None:
    """A WeightAverage of `model` when trainer.ema is set."""
    return None if decay is None else WeightAverage(model, decay)
