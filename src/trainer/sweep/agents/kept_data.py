"""A sweep's in-memory data set, loaded once per trial template: after the template composes a
trial's config (compose_cache.warm), it loads the set that config names as a trial would and
keeps it (trainer.data.stored.keep), so that the trials it forks next find it loaded (about
30 ms of each 1-second trial on digits; a decoded set's whole load on larger ones). Only sets
whose files cannot change during the sweep are kept, one at a time; a streamed set, one the
config leaves out, or a config that fails its checks is left to the trial."""

from __future__ import annotations

from typing import Any

import torch

from trainer.data.plan import plan_data
from trainer.data.stored import keep as keep_set
from trainer.preflight import check_schema
from trainer.train.models import input_spec


def keep(cfg: Any) -> None:
    """Keep the in-memory set the composed trial config `cfg` trains on (CPU tensors only: the
    template never touches CUDA)."""
    threads = torch.get_num_threads()
    # One thread: torch's parallel ops would start OpenMP's thread team in the template, and a
    # process forked from one whose team has run hangs at its own first parallel op (GNU
    # OpenMP). With one thread they run inline and no team starts.
    torch.set_num_threads(1)
    try:
        conf = check_schema(cfg)
        plan = plan_data(conf.data, *input_spec(conf.model))
        if plan.pipeline == "memory":
            keep_set(conf.data, plan.stored_format, workers=plan.decode_workers)
    except Exception:  # noqa: BLE001, S110 (the trial loads it itself and reports what fails)
        return
    finally:
        torch.set_num_threads(threads)
