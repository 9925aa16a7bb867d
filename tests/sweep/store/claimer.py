"""An agent-like process for the exactly-once tests: `python claimer.py URL SWEEP_DIR SWEEP_ID
CAP` claims runs through the store's hand-out (SweepStore.claim, a grid of CAP points) until
the sweep has none left, and prints the ids it got, one a line. With a fifth argument `hold` it
claims one run, prints its id and keeps it running (until killed), as an agent with a trial.
With CLAIMER_GO set to a path, it prints "ready" and waits for that file before its first
claim, so that every claimer starts at once however slowly the processes came up; each run it
gets is held for CLAIMER_HOLD_S seconds (default 0) before it is finished, as a short trial."""

from __future__ import annotations

import os
import sys
import time
import uuid

from trainer.sweep.store.opening import open_store


def main(url: str, sweep_dir: str, sweep_id: str, cap: int, hold: bool) -> None:
    store = open_store(sweep_dir, url or None, sweep_id)

    def propose(runs):
        return None if len(runs) >= cap else ({"i": len(runs)}, None)

    def new_id():
        return uuid.uuid4().hex[:8]

    go = os.environ.get("CLAIMER_GO")
    if go:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.01)
    hold_s = float(os.environ.get("CLAIMER_HOLD_S", "0"))
    while (run := store.claim(propose, new_id=new_id, agent_pid=os.getpid())) is not None:
        print(run.id, flush=True)
        if hold:
            time.sleep(600)
        time.sleep(hold_s)
        store.update(run.id, state="finished")


if __name__ == "__main__":
    main(*sys.argv[1:4], int(sys.argv[4]), sys.argv[5:6] == ["hold"])
