"""The dashboard's write side, there only with --control: the random token its printed URL
carries (checked on every action), and W&B's verbs applied to a served sweep through a store
opened to write for that one action; the pages go on reading through their read-only stores."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.sweep.report import leaderboard
from trainer.sweep.store import steering
from trainer.sweep.store.directory import SweepLayout
from trainer.sweep.store.opening import open_store

if TYPE_CHECKING:
    from trainer.sweep.report.dashboard.catalog import SweepPage

TOKEN_HEADER = "X-Trainer-Token"  # the page sends the token here, never in a URL it fetches
TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, as Jupyter's token is random
MAX_BODY = 64 * 1024  # an action's JSON is a verb or a list of run ids


class BadAction(ValueError):
    """A request body that names no action the dashboard knows (answered 400)."""


def action(body: Any) -> tuple[str, list[str]]:
    """(verb, run ids) of a request body: {"verb": "pause" | "resume" | "stop" | "cancel"}, or
    {"stop": [run ids]} (the sweep goes on); BadAction saying what is expected otherwise."""
    if isinstance(body, dict) and set(body) == {"verb"} and body["verb"] in steering.VERBS:
        return body["verb"], []
    runs = body.get("stop") if isinstance(body, dict) and set(body) == {"stop"} else None
    if isinstance(runs, list) and runs and all(isinstance(r, str) and r for r in runs):
        return "stop", list(dict.fromkeys(runs))
    raise BadAction(
        f'the body must be JSON {{"verb": one of {", ".join(steering.VERBS)}}} or '
        f'{{"stop": [run ids]}}, not {str(body)[:200]}'
    )


@dataclass
class Control:
    """Steering from the page: `storage` (the catalog's: None, or a server's URL), `token`
    (new at each start, kept in memory only) and `by`, the name the store records for a change
    made here (user@host of the server, "(dashboard)")."""

    storage: str | None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(TOKEN_BYTES), repr=False)
    by: str = field(default_factory=lambda: f"{steering.who()} (dashboard)")

    def allows(self, given: str | None) -> bool:
        """Whether `given` (the request's token header) is this server's token, compared in
        constant time."""
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def act(self, page: SweepPage, body: Any) -> str:
        """Apply the action `body` names to the sweep of `page` and say what it did, as the
        command line's verbs do: BadAction for a body that names no action, SteerError
        (nothing changed) for a verb that does not apply."""
        sweep_id, directory = page.sweep_id, page.directory
        verb, runs = action(body)
        store = open_store(directory, self.storage, sweep_id if self.storage else None)
        try:
            if runs:
                stopped = store.stop_runs(runs, sweep_id)
                return " ".join(
                    f"run {run.id}: "
                    + (
                        f"asked to stop; its agent sends SIGTERM within {steering.POLL_S:g} s, "
                        "it saves last.pt and ends stopped."
                        if run.state == "running"
                        else "was waiting to resume: stopped now."
                    )
                    for run in stopped
                )
            change = store.steer(verb, sweep_id, self.by)
            going = [r for r in store.runs() if r.state in ("running", "preempted")]
            if verb in ("stop", "cancel") and not going and not store.live_agents():
                leaderboard.write_final(store, sweep_id, SweepLayout(directory))  # nobody left
            return f"sweep {sweep_id}: {change.said()}."
        finally:
            store.close()
