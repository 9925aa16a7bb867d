"""Population-based training between its members: what a member reports at each interval (its
score, hyperparameters and a checkpoint), which leader a lagging member copies and how it
perturbs or resamples the leader's values, and the lineage each member keeps. Members talk
through files in the sweep's `pbt/` folder (the folder every agent's trials write into), so a
member never waits for another: a member at epoch E compares itself with the members that have
reached E (asynchronous PBT, as Ray Tune's default). Light imports only: the sweep engine and
every trial read it."""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_ID_ENV = "WANDB_RUN_ID"  # the member's id: its run's, set for every trial
FOLDER_KEY = "pbt_folder"  # the store key of the one folder every member of the sweep reports to
ENV = "TRAINER_PBT"  # the member's settings (JSON), set by the agent for a PBT sweep's trials
KEY = "pbt"  # a PBT sweep configuration's block of settings (beside W&B's keys)
# The keys a member changes in place, without rebuilding or recompiling anything.
KEYS = (
    "optimizer.lr",
    "optimizer.weight_decay",
    "optimizer.momentum",
    "trainer.label_smoothing",
    "trainer.grad_clip",
)
# W&B's distributions a PBT parameter may use: sampled, perturbed (continuous) or resampled.
CONTINUOUS = ("uniform", "log_uniform_values", "int_uniform")
DEFAULTS = {
    "population": 4,
    "interval": 1,
    "quantile": 0.25,
    "resample_probability": 0.25,
    "seed": 0,
}
FACTORS = (0.8, 1.2)  # explore: each continuous value times one of these, kept in its bounds


@dataclass(frozen=True)
class Settings:
    """One member's view of the sweep: the PBT keys, the search space, the metric, the folder."""

    folder: str  # <sweep dir>/pbt
    parameters: dict[str, dict[str, Any]]  # Hydra key -> W&B spec
    metric: str
    maximize: bool
    member: str = ""  # the run id (WANDB_RUN_ID: the same settings serve every member)
    population: int = DEFAULTS["population"]
    interval: int = DEFAULTS["interval"]
    quantile: float = DEFAULTS["quantile"]
    resample_probability: float = DEFAULTS["resample_probability"]
    seed: int = 0

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


def is_pbt(config: dict[str, Any]) -> bool:
    """Whether sweep configuration `config` runs population-based training."""
    return isinstance(config.get(KEY), dict)


def settings_of(config: dict[str, Any]) -> dict[str, Any]:
    """The `pbt` block of a PBT sweep configuration, defaults filled in."""
    return {**DEFAULTS, **(config.get(KEY) or {})}


def swept(parameters: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The parameters that differ between members (a single `value` is every member's)."""
    return {k: s for k, s in parameters.items() if "value" not in s}


# ---------------------------------------------------------------------------------------------
# Sampling and exploring


def sample(spec: dict[str, Any], rng: random.Random) -> Any:
    """One value of a W&B parameter spec PBT accepts (values, uniform, log_uniform_values,
    int_uniform; a single value)."""
    if "value" in spec:
        return spec["value"]
    if "values" in spec:
        return rng.choice(list(spec["values"]))
    low, high = spec["min"], spec["max"]
    kind = spec.get("distribution", "int_uniform" if isinstance(low, int) else "uniform")
    if kind == "int_uniform":
        return rng.randint(int(low), int(high))
    if kind == "log_uniform_values":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def initial(settings_seed: int, index: int, parameters: dict[str, dict[str, Any]]) -> dict:
    """Member `index`'s starting values: the same sweep seed gives the same population."""
    rng = random.Random(f"{settings_seed}:start:{index}")
    return {key: sample(spec, rng) for key, spec in sorted(parameters.items())}


def perturb(spec: dict[str, Any], value: Any, rng: random.Random, resample_p: float) -> Any:
    """Explore one value: resampled with probability `resample_p`, else a continuous value
    times 0.8 or 1.2 within its bounds, a listed value moved to a neighbour in the list."""
    if "value" in spec:
        return spec["value"]
    if rng.random() < resample_p:
        return sample(spec, rng)
    if "values" in spec:
        values = list(spec["values"])
        if value not in values:
            return rng.choice(values)
        i = values.index(value) + rng.choice((-1, 1))
        return values[min(max(i, 0), len(values) - 1)]
    moved = min(max(value * rng.choice(FACTORS), spec["min"]), spec["max"])
    return round(moved) if spec.get("distribution") == "int_uniform" else moved


# ---------------------------------------------------------------------------------------------
# What members report and decide


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


def checkpoint_path(settings: Settings, epoch: int) -> Path:
    """Where this member keeps its checkpoint of `epoch` for others to copy."""
    return settings.home / f"epoch-{epoch:04d}.pt"


def publish(settings: Settings, report: Report) -> None:
    """Make `report` visible to the other members (its checkpoint is written first)."""
    _write_json(report_path(settings, report.member, report.epoch), asdict(report))


def reports_at(settings: Settings, epoch: int) -> list[Report]:
    """Every member's report of `epoch` so far (this member's included)."""
    found = []
    for path in sorted(Path(settings.folder).glob(f"*/epoch-{epoch:04d}.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):  # being replaced right now: the next boundary sees it
            continue
        if Path(doc["checkpoint"]).is_file() and math.isfinite(doc["score"]):
            found.append(Report(**doc))
    return found


def prune(settings: Settings, epoch: int) -> list[Path]:
    """Remove the checkpoints of the boundaries every member has gone past: once the whole
    population reported `epoch`, each decided at every earlier boundary, so no one copies from
    those any more (a sweep keeps one checkpoint per member, not one per interval)."""
    if len(reports_at(settings, epoch)) < settings.population:
        return []
    removed = []
    for path in Path(settings.folder).glob("*/epoch-*.pt"):
        if int(path.stem.split("-")[1]) < epoch:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def ranked(settings: Settings, reports: list[Report]) -> list[Report]:
    """Best first (ties: by member id, so every member ranks alike)."""
    sign = -1.0 if settings.maximize else 1.0
    return sorted(reports, key=lambda r: (sign * r.score, r.member))


def quantile_size(settings: Settings, n: int) -> int:
    """How many members make the top (and the bottom) quantile of `n` (Ray Tune's rule)."""
    size = math.ceil(n * settings.quantile)
    return min(size, n // 2)


def decide(settings: Settings, own: Report) -> Step:
    """The member's step at `own.epoch`: in the bottom quantile of the members at this epoch,
    it copies a leader from the top quantile and explores the leader's values; else it keeps
    its own checkpoint and values."""
    order = ranked(settings, reports_at(settings, own.epoch))
    size = quantile_size(settings, len(order))
    names = [r.member for r in order]
    keep = Step(own.epoch, dict(own.params), None, own.score)
    if size == 0 or own.member not in names or names.index(own.member) < len(order) - size:
        return keep
    rng = random.Random(f"{settings.seed}:{own.member}:{own.epoch}")
    leader = rng.choice(order[:size])
    params = {
        key: perturb(settings.parameters[key], value, rng, settings.resample_probability)
        if key in settings.parameters
        else value
        for key, value in leader.params.items()
    }
    return Step(own.epoch, params, leader.member, own.score, leader.score)


# ---------------------------------------------------------------------------------------------
# Lineage


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


def member_env(config: dict[str, Any], folder: Path) -> dict[str, str]:
    """The environment that makes a trial of sweep `config` a PBT member (nothing for another
    method; its id is its run's); `folder` is the sweep's pbt/ folder."""
    if not is_pbt(config):
        return {}
    metric = config.get("metric") or {}
    settings = Settings(
        folder=str(folder),
        parameters=dict(config.get("parameters") or {}),
        metric=metric["name"],
        maximize=metric.get("goal") == "maximize",
        **settings_of(config),
    )
    return settings.to_env()


def lineage_of(folder: str | Path | None, member: str) -> list[dict[str, Any]]:
    """The lineage of `member` in the sweep's PBT folder (`FOLDER_KEY`; None: no member has
    started), as results.json gives it: one entry per interval, {epoch, params, copied_from}."""
    if not folder:
        return []
    return [asdict(s) for s in Lineage.read(folder, member).steps]
