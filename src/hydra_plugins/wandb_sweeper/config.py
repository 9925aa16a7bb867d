"""The `hydra.sweeper.*` keys of `hydra/sweeper=wandb` (registered with Hydra's ConfigStore): each
key's type and default is declared here once; the sweep side derives its options from these."""

from dataclasses import dataclass, field
from typing import Any, Optional  # noqa: UP035 (Hydra scans this module without sys.modules; no postponed annotations)

from hydra.core.config_store import ConfigStore


@dataclass
class MetricConf:
    # The W&B sweep metric; unset keys stay out of the sweep (no name: a sweep without a metric).
    name: Optional[str] = None  # noqa: UP045  one of trainer.config.schema.EPOCH_METRICS, e.g. val/acc
    goal: Optional[str] = None  # noqa: UP045  minimize (W&B's default) | maximize
    target: Optional[float] = None  # noqa: UP045  the sweep ends once a run reaches this value
    impute: Optional[str] = None  # noqa: UP045  bayes: value of failed runs (latest | best | worst)
    impute_while_running: Optional[str] = None  # noqa: UP045  latest | best | worst | false


@dataclass
class PbtConf:
    # method: pbt (population-based training, docs/pbt.md)
    population: int = 4  # members, each a run trained for trainer.max_epochs
    interval: int = 1  # epochs between decisions
    quantile: float = 0.25  # the bottom quantile copies a member of the top quantile
    resample_probability: float = 0.25  # explore: resample a value instead of x0.8 / x1.2
    seed: int = 0  # the members' starting values and every explore draw follow from it


@dataclass
class RunnerConf:
    # Where and how the sweep runs (the local sweep's files: hydra.sweep.dir when set, else
    # <paths.output_dir>/sweeps/<sweep id>/). The one declaration of these keys: the frozen
    # options both backends take (trainer.sweep.options.SweepOptions) are built from it.
    backend: str = "local"  # local (offline, SQLite store) | wandb (the W&B server)
    # backend=local: the sweep's state in a database server every agent's machine reaches
    # (postgresql://user@host:5432/db, SQLAlchemy's spelling); null: sweep.db in the sweep dir
    storage: Optional[str] = None  # noqa: UP045
    # agents started here: null = one per device slot (see devices), or 1 on a machine without
    # GPUs (backend=wandb: 0 only creates the sweep)
    agents: Optional[int] = None  # noqa: UP045
    count: Optional[int] = None  # noqa: UP045  runs per agent (None: until the sweep ends)
    sweep_id: Optional[str] = None  # noqa: UP045  join or resume an existing sweep
    project: Optional[str] = None  # noqa: UP045  backend=wandb: W&B project (default: logger.project)
    entity: Optional[str] = None  # noqa: UP045  backend=wandb: W&B entity (default: logger.entity)
    dry_run: bool = (
        False  # print the W&B config and the number of runs, write sweep.yaml, run nothing
    )
    rerun_crashed: bool = False  # resuming: run again the trials a crash interrupted
    max_consecutive_failures: int = 5  # an agent gives up after this many failed trials in a row
    # a run lost with its agent, job or host (SIGKILL, a node gone, a heartbeat lapsed) is handed
    # out again and resumed from its last.pt this many times, then crashed; a cluster's stop that
    # let the trial save (SLURM's warning, SIGTERM inside a job) always resumes, uncounted
    max_retries: int = 3
    cpus_per_trial: Optional[int] = None  # noqa: UP045  CPUs (threads, cores) per concurrent trial; None: an equal share
    # GPUs the trials use: auto (every GPU torch sees here; none on a CPU machine), a list of
    # indices (cuda:i as torch numbers them here), or null (no assignment); each trial gets its
    # devices through CUDA_VISIBLE_DEVICES, and a device runs trials_per_device trials at once
    devices: Any = "auto"
    trials_per_device: int = 1  # trials packed on one GPU (free memory checked before packing)
    gpus_per_trial: int = 1  # GPUs per trial; above 1 a trial is torchrun + trainer.strategy=ddp
    prewarm: bool = False  # compile each distinct workload (model, input, compile) once, first
    # each configuration runs this many times, with trainer.seed, trainer.seed+1, ...; ranked
    # by the mean (± std) over its seeds, which is also what the search engine is told
    repeats: int = 1
    # an agent started as a launcher job (SLURM, ...) waits this long (s) on a paused sweep, then
    # exits 0 so its allocation does not idle; local agents wait until `trainer.sweep resume`
    paused_wait_s: float = 600.0
    # a new sweep's engine is told the finished runs of earlier sweeps that lie in its space
    # (W&B's prior_runs): their ids or directories, local or in `storage`'s database, as
    # one id, or several as [id1,id2]; bayes, Optuna and Ax use them, grid and random ignore them
    warm_start: Any = None


@dataclass
class WandbSweeperConf(RunnerConf):
    # hydra/sweeper=wandb: RunnerConf's keys, then the W&B sweep configuration's
    _target_: str = "hydra_plugins.wandb_sweeper.wandb_sweeper.WandbSweeper"
    # The W&B sweep configuration (https://docs.wandb.ai/guides/sweeps/sweep-config-keys).
    method: str = "random"  # grid | random | bayes | custom (with scheduler) | pbt
    # {name, goal, ...} or dotted (hydra.sweeper.metric.name=val/acc); null: no metric
    metric: Optional[MetricConf] = field(default_factory=MetricConf)  # noqa: UP045
    # Hydra key or config group -> W&B spec. Typed Any, as scheduler, early_terminate and
    # RunnerConf.devices (W&B's free structure, or a choice of spellings), so that a whole search
    # space typed on the command line (hydra.sweeper.parameters={optimizer.lr: {...}}) needs
    # no `+` (an empty dict node refuses new keys under Hydra's struct flag)
    parameters: Any = None
    # The same search space in Hydra's sweepers' spelling (Optuna, Nevergrad, Ax): Hydra key or
    # config group -> Hydra's override grammar, e.g. optimizer.lr: tag(log, interval(1e-4, 1e-1)),
    # model: choice(small_cnn, resnet18); a plain value is fixed for every trial. Use one of the
    # two spellings; the command line's sweeps (key=a,b) go with either. Typed Any as
    # `parameters` (a dict typed on the command line merges into no Optional[dict] node)
    params: Any = None
    # multi-objective (method: custom): [{name: val/acc, goal: maximize}, {name: ..., goal: ...}]
    metrics: Optional[list[MetricConf]] = None  # noqa: UP045
    # method: custom: {engine: optuna | ax | wandb, source: file.py, optimizer: study factory in
    # source, search_space: define-by-run function in source}; source: relative to the sweep
    # definition or the working directory
    scheduler: Any = None
    pbt: PbtConf = field(default_factory=PbtConf)  # method: pbt's settings
    early_terminate: Any = None  # {type: hyperband, min_iter | max_iter + s, eta, strict}
    run_cap: Optional[int] = None  # noqa: UP045  the most runs the sweep starts (every method)
    name: Optional[str] = None  # noqa: UP045  the sweep's name (W&B)
    description: Optional[str] = None  # noqa: UP045


ConfigStore.instance().store(
    group="hydra/sweeper", name="wandb", node=WandbSweeperConf, provider="compiled-trainer"
)
