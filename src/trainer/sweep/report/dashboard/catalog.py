"""The sweeps a dashboard serves: the one named on its command line, else every local sweep
under the output root or every sweep of a database server; each read through a read-only
store, its costly parts (the sweep's state, importance) kept while no run changes."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.errors import TrainerError
from trainer.sweep.report.dashboard import figures, snapshot
from trainer.sweep.report.dashboard.importance import importances
from trainer.sweep.search import dispatch
from trainer.sweep.store import steering
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout, UnknownSweep, find, known, recorded
from trainer.sweep.store.opening import open_reader, sweep_ids
from trainer.sweep.store.storage import shown


class SweepPage:
    """One sweep's page data, read afresh on every poll from its read-only store; `directory`
    is the sweep's folder here (where --control's writer opens it and writes its results)."""

    def __init__(self, sweep_id: str, store: SweepStore, directory: Path) -> None:
        self.sweep_id = sweep_id
        self.store = store
        self.directory = directory
        self.lock = threading.Lock()  # one poll reads at a time; the memo below is shared
        self._key: tuple | None = None
        self._memo: dict[str, Any] = {}

    def view(self) -> dict[str, Any]:
        """snapshot.view with the sweep's state and parameter importance, recomputed only
        when a run's state or epoch count (or the sweep's stored state) changed, and the state
        its owner's verbs act on with the verbs that apply to it (the page's buttons)."""
        with self.lock:
            view = snapshot.view(self.store, self.sweep_id, self.store.where)
            lifecycle = self.store.lifecycle()[0]
            view["lifecycle"] = lifecycle
            view["verbs"] = [v for v in steering.VERBS if lifecycle in steering.TRANSITIONS[v]]
            stored = str(self.store.get("state", "created"))
            key = (stored, tuple((r["id"], r["state"], r["epochs"]) for r in view["runs"]))
            if key != self._key:
                self._memo = {
                    "state": dispatch.sweep_state(stored, self.store),
                    "importance": importances(view["runs"], view["parameters"], view["objectives"]),
                }
                self._key = key
            return {**view, **self._memo}

    def json(self) -> str:
        return figures.page_json(self.view())


@dataclass
class Catalog:
    """Where the sweeps come from: `root` (the output root) or `storage` (a server's URL),
    and `only`, the sweep the command named (an id or a directory)."""

    root: Path
    storage: str | None = None
    only: str | None = None
    _pages: dict[str, SweepPage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.only is not None:  # fail now, before serving, on a sweep that is not there
            page = self._open(self.only)
            self._pages[page.sweep_id] = page
            self.only = page.sweep_id

    @property
    def where(self) -> str:
        """What the list shows as the sweeps' home (a server's URL without its password)."""
        return shown(self.storage) if self.storage else str(SweepLayout.sweeps_dir(self.root))

    def _open(self, sweep: str) -> SweepPage:
        """The page of the sweep named `sweep` (an id, or a local directory), its store read
        only."""
        if self.storage is None:
            layout = find("sweep", sweep, self.root)
            store = open_reader(layout.root)
            return SweepPage(store.get("sweep_id") or layout.root.name, store, layout.root)
        try:
            directory = find("sweep", sweep, self.root).root
        except UnknownSweep:
            directory = SweepLayout.under(self.root, sweep).root
        sweep_id = (recorded(directory) or {}).get("sweep_id") or sweep
        if sweep_id not in sweep_ids(self.storage):
            raise TrainerError(
                f"--storage {shown(self.storage)}: no sweep {sweep_id!r} in that database; "
                "list its sweeps with python -m trainer.sweep dashboard --storage URL"
            )
        return SweepPage(sweep_id, open_reader(directory, self.storage, sweep_id), directory)

    def ids(self) -> list[str]:
        """The sweeps served: the one named, else every sweep there now, oldest first."""
        if self.only is not None:
            return [self.only]
        if self.storage is not None:
            return sweep_ids(self.storage)
        return [sweep_id for sweep_id, _ in known(self.root)]

    def page(self, sweep_id: str) -> SweepPage:
        """The page of a served sweep (KeyError for any other id)."""
        with self._lock:
            if sweep_id not in self._pages:
                if sweep_id not in self.ids():
                    raise KeyError(sweep_id)
                self._pages[sweep_id] = self._open(sweep_id)
            return self._pages[sweep_id]

    def listing(self) -> dict[str, Any]:
        """The sweeps served, each with its method, stored state and number of runs."""
        sweeps = []
        for sweep_id in self.ids():
            try:
                store = self.page(sweep_id).store
                config = store.config or {}
                runs = len(store.runs())
                entry = {"method": config.get("method"), "state": store.get("state"), "runs": runs}
            except (TrainerError, KeyError) as err:  # a sweep still being created, a stray dir
                entry = {"method": None, "state": f"unreadable: {err}", "runs": None}
            sweeps.append({"id": sweep_id, **entry})
        return {"where": self.where, "only": self.only, "sweeps": sweeps}

    def warm(self) -> None:
        """Read the named sweep once (Optuna and scikit-learn imported, importance computed),
        so the browser's first poll finds it ready; a failure is the page's to show."""
        if self.only is not None:
            with contextlib.suppress(Exception):  # the first poll reports it
                self.page(self.only).json()

    def close(self) -> None:
        for page in self._pages.values():
            page.store.close()
