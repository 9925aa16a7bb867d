"""A sweep's lifecycle as its owner steers it, W&B's verbs (pause, resume, stop, cancel; stop
one run): the state machine and its refusals. The state lives in the store's `state` key, who
changed it and when in `steered`, so every agent of every host obeys it at its next poll."""

from __future__ import annotations

import difflib
import getpass
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from trainer.errors import TrainerError

RUNNING, PAUSED, STOPPED, CANCELLED, FINISHED = (
    "running",
    "paused",
    "stopped",
    "cancelled",
    "finished",
)
# How often every agent looks at its sweep's state and its run's stop flag, in seconds: a
# waiting agent's poll of a paused sweep, and a running run's heartbeat (local_agent).
POLL_S = 2.0
STEERED_KEY = "steered"  # the sweep key of the last change: {state, verb, by, at}
HALTED = (PAUSED, STOPPED, CANCELLED)  # no run is handed out
ENDED = (STOPPED, CANCELLED, FINISHED)  # no verb but `show` acts on it

# The state each verb leads to, from each state it applies to; a state missing from a verb's row is refused.
TRANSITIONS: dict[str, dict[str, str]] = {
    "pause": {RUNNING: PAUSED},
    "resume": {PAUSED: RUNNING},
    "stop": {RUNNING: STOPPED, PAUSED: STOPPED},
    "cancel": {RUNNING: CANCELLED, PAUSED: CANCELLED},
}
VERBS = tuple(TRANSITIONS)
DONE = {
    "pause": "paused",
    "resume": "resumed",
    "stop": "stopped",
    "cancel": "cancelled",
    "extend": "extended",  # a new revision of its definition (python -m trainer.sweep extend)
}


class SteerError(TrainerError):
    """A verb that does not apply (an unknown run, a sweep not paused, a run or sweep that has
    ended): one paragraph, exit 2, nothing in the store changed."""


@dataclass(frozen=True)
class Change:
    """The last change of a sweep's state by its owner: the state, the verb, who (user@host)
    and when (seconds since the epoch)."""

    state: str
    verb: str
    by: str
    at: float

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> Change | None:
        return None if not stored else cls(**stored)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at))

    def said(self) -> str:
        """`paused by ada@node1 at 2026-12-07 08:40:12 UTC` (`resumed by ...` after a resume)."""
        return f"{DONE.get(self.verb, self.state)} by {self.by} at {self.when}"


def who() -> str:
    """The person steering, as user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def lifecycle(stored: str | None, change: Change | None) -> str:
    """The state the verbs act on: paused and cancelled as stored; stopped when its owner
    stopped it; finished; else running (created, interrupted, failed, or its agents ended with
    runs left: agents may still join it)."""
    if stored in (PAUSED, CANCELLED, FINISHED):
        return stored
    if stored == STOPPED and change is not None and change.state == STOPPED:
        return STOPPED  # by its owner, not a sweep whose agents took their count
    return RUNNING


def refusal(verb: str, state: str, change: Change | None, sweep_id: str) -> str:
    """Why `verb` does not apply to a sweep in `state`, and what to do instead."""
    how = f" ({change.said()})" if change is not None and change.state == state else ""
    cli = "python -m trainer.sweep"
    if state in ENDED:
        return (
            f"{verb} {sweep_id}: the sweep has ended, {state}{how}; there is nothing left to "
            f"{verb}, and no run of it is handed out again. Its report: {cli} show {sweep_id}; "
            "to search on, start a new sweep."
        )
    if verb == "resume":
        return (
            f"resume {sweep_id}: the sweep is {state}, not paused{how}: nothing to resume. "
            f"Pause it first with {cli} pause {sweep_id}."
        )
    return (
        f"{verb} {sweep_id}: the sweep is already {state}{how}; resume it with {cli} resume "
        f"{sweep_id}, or end it with {cli} stop (or cancel) {sweep_id}."
    )


def next_state(verb: str, state: str, change: Change | None, sweep_id: str) -> str:
    """The state `verb` leads to from `state`; SteerError when it does not apply."""
    after = TRANSITIONS[verb].get(state)
    if after is None:
        raise SteerError(refusal(verb, state, change, sweep_id))
    return after


def unknown_runs(asked: list[str], ids: list[str], sweep_id: str) -> str | None:
    """The refusal for run ids the sweep does not have (with "did you mean"), or None."""
    missing = [run_id for run_id in asked if run_id not in ids]
    if not missing:
        return None
    hints = []
    for run_id in missing:
        close = difflib.get_close_matches(run_id, ids, n=1)
        hints.append(f"{run_id} (did you mean {close[0]}?)" if close else run_id)
    return (
        f"stop {sweep_id}: no run {', '.join(hints)} in the sweep ({len(ids)} run(s): "
        f"{', '.join(ids) if len(ids) <= 12 else ', '.join(ids[:12]) + ', ...'}); see them "
        f"with python -m trainer.sweep show {sweep_id}. Nothing was stopped."
    )


def ended_runs(ended: dict[str, str], sweep_id: str) -> str | None:
    """The refusal for runs that have already ended (id -> state), or None."""
    if not ended:
        return None
    said = ", ".join(f"{run_id} ({state})" for run_id, state in ended.items())
    return (
        f"stop {sweep_id}: {said} already ended; only a running run, or one waiting to resume, "
        "can be stopped. Nothing was stopped."
    )
