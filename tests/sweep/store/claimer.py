"""An agent-like process for the exactly-once tests: `python claimer.py URL SWEEP_DIR SWEEP_ID
CAP` claims runs through the store's hand-out (SweepStore.claim, a grid of CAP points) until
the sweep has none left, and prints the ids it got, one a line."""

from __future__ import annotations

import os
import sys
import uuid

from trainer.sweep.store.opening import open_store


def main(url: str, sweep_dir: str, sweep_id: str, cap: int) -> None:
    store = open_store(sweep_dir, url or None, sweep_id)

    def propose(runs):
        return None if len(runs) >= cap else ({"i": len(runs)}, None)

    while (
        run := store.claim(propose, new_id=lambda: uuid.uuid4().hex[:8], agent_pid=os.getpid())
    ) is not None:
        store.update(run.id, state="finished")
        print(run.id, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
