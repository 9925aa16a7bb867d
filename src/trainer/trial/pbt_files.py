"""A population-based-training member's files: what a member reports at each interval (its score,
hyperparameters and a checkpoint), the decision its agent answers with (keep its own values, or
copy a leader and take explored values), and the lineage the member keeps. Members and agents
talk through the sweep's `pbt/` folder, so a member never waits for another member, only for its
own agent (one poll). The policy that decides lives on the sweep side
(`trainer.sweep.search.pbt_policy`). Light imports only: every trial reads this."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_ID_ENV = "WANDB_RUN_ID"  # the member's id: its run's, set for every trial
ENV = "TRAINER_PBT"  # the member's settings (JSON), set by the agent for a PBT sweep's trials
DECISION_POLL_S = 0.05  # how often a member looks for its agent's decision
# How long a member waits for its agent's decision before it keeps its own values (the agent
# answers within one poll while it runs; a member whose agent is gone trains on).
DECISION_WAIT_S = 300.0


@dataclass(frozen=True)
class Settings:
    """One member's view of the sweep: the PBT keys, the search space, the metric, the folder
    and the sweep's PBT settings (hydra.sweeper.pbt, defaults filled in by the sweep side)."""

    folder: str  # <sweep dir>/pbt
    parameters: dict[str, dict[str, Any]]  # Hydra key -> W&B spec
    metric: str
    maximize: bool
    population: int
    interval: int
    quantile: float
    resample_probability: float
    seed: int
    member: str = ""  # the run id (WANDB_RUN_ID: the same settings serve every member)

    def to_env(self) -> dict[str, str]:
        """The same for every member, so trials still fork from the agent's template."""
        doc = {k: v for k, v in asdict(self).items() if k != "member"}
        return {ENV: json.dumps(doc, sort_keys=True)}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings | None:
        """This trial's settings when it is a PBT member (its run id: W&B's), else None."""
        environ = os.environ if environ is None else environ
        text = environ.get(ENV)
        if not text:
            return None
        return cls(**json.loads(text), member=environ.get(RUN_ID_ENV, ""))

    @property
    def home(self) -> Path:
        return Path(self.folder) / self.member

    def is_boundary(self, epoch: int, max_epochs: int) -> bool:
        """Whether a member decides after `epoch` epochs (never after its last)."""
        return 0 < epoch < max_epochs and epoch % self.interval == 0


@dataclass(frozen=True)
class Report:
    """A member at one boundary: its score, values and the checkpoint it had then."""

    member: str
    epoch: int
    score: float
    params: dict[str, Any]
    checkpoint: str


@dataclass
class Step:
    """One entry of a member's lineage: the values it trains with from `epoch` on, and the
    member whose checkpoint it continued from then (None: its own)."""

    epoch: int
    params: dict[str, Any]
    copied_from: str | None = None
    score: float | None = None  # its own score at `epoch`, before copying
    leader_score: float | None = None


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, path)


def report_path(settings: Settings, member: str, epoch: int) -> Path:
    return Path(settings.folder) / member / f"epoch-{epoch:04d}.json"


def decision_path(settings: Settings, member: str, epoch: int) -> Path:
    return Path(settings.folder) / member / f"decision-{epoch:04d}.json"


def checkpoint_path(settings: Settings, epoch: int) -> Path:
    """Where this member keeps its checkpoint of `epoch` for others to copy."""
    return settings.home / f"epoch-{epoch:04d}.pt"


def publish(settings: Settings, report: Report) -> None:
    """Make `report` visible to the other members and the agent (its checkpoint first)."""
    _write_json(report_path(settings, report.member, report.epoch), asdict(report))


def _read_report(path: Path) -> Report | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):  # being replaced right now: the next look sees it
        return None
    if Path(doc["checkpoint"]).is_file() and math.isfinite(doc["score"]):
        return Report(**doc)
    return None


def reports_at(settings: Settings, epoch: int) -> list[Report]:
    """Every member's report of `epoch` so far (this member's included)."""
    found = (
        _read_report(p) for p in sorted(Path(settings.folder).glob(f"*/epoch-{epoch:04d}.json"))
    )
    return [r for r in found if r is not None]


def undecided(settings: Settings, member: str) -> list[Report]:
    """The reports of `member` that its agent has not answered yet, oldest first."""
    found = []
    for path in sorted((Path(settings.folder) / member).glob("epoch-*.json")):
        epoch = int(path.stem.split("-")[1])
        if not decision_path(settings, member, epoch).is_file():
            report = _read_report(path)
            found += [report] if report is not None else []
    return found


def answer(settings: Settings, member: str, step: Step) -> None:
    """The agent's decision for `member` at `step.epoch`."""
    _write_json(decision_path(settings, member, step.epoch), asdict(step))


def await_decision(settings: Settings, report: Report, wait_s: float = DECISION_WAIT_S) -> Step:
    """The agent's answer to `report` (published already); after `wait_s` without one, the
    member keeps its own checkpoint and values."""
    path = decision_path(settings, report.member, report.epoch)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            return Step(**json.loads(path.read_text()))
        except (OSError, ValueError):  # not written yet (it is replaced whole, never torn)
            time.sleep(DECISION_POLL_S)
    return Step(report.epoch, dict(report.params), None, report.score)


def prune(settings: Settings, epoch: int) -> list[Path]:
    """Remove the checkpoints of the boundaries every member has gone past: once the whole
    population reported `epoch`, each was answered at every earlier boundary, so no one copies
    from those any more (a sweep keeps one checkpoint per member, not one per interval)."""
    if len(reports_at(settings, epoch)) < settings.population:
        return []
    removed = []
    for path in Path(settings.folder).glob("*/epoch-*.pt"):
        if int(path.stem.split("-")[1]) < epoch:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


@dataclass
class Lineage:
    """A member's steps, kept in pbt/<member>/lineage.json (read back when it resumes)."""

    steps: list[Step] = field(default_factory=list)

    @classmethod
    def read(cls, folder: str | Path, member: str) -> Lineage:
        path = Path(folder) / member / "lineage.json"
        if not path.is_file():
            return cls()
        return cls([Step(**s) for s in json.loads(path.read_text())])

    def write(self, folder: str | Path, member: str) -> None:
        _write_json(Path(folder) / member / "lineage.json", [asdict(s) for s in self.steps])

    def add(self, step: Step) -> None:
        """Record `step` (one per epoch: a step decided again after a resume replaces it)."""
        self.steps = [s for s in self.steps if s.epoch != step.epoch] + [step]
        self.steps.sort(key=lambda s: s.epoch)

    def at(self, epoch: int) -> Step | None:
        """The step in force after `epoch` epochs."""
        before = [s for s in self.steps if s.epoch <= epoch]
        return before[-1] if before else None


def lineage_of(folder: str | Path | None, member: str) -> list[dict[str, Any]]:
    """The lineage of `member` in the sweep's PBT folder (None: no member has started), as
    results.json gives it: one entry per interval, {epoch, params, copied_from}."""
    if not folder:
        return []
    return [asdict(s) for s in Lineage.read(folder, member).steps]
