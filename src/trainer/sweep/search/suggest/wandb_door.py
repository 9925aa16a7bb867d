"""The one door to W&B's experimental sweep scheduler (`wandb.sdk.sweeps.scheduler`, the code of
`wandb sweep-scheduler`): its optimizers built for a sweep and driven through ask/tell, and its
own parameter mappings asked what they refuse. tests/sweep/search/test_wandb_door.py pins each use."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from trainer.errors import TrainerError
from trainer.sweep.search.classic import plain
from trainer.sweep.search.custom_method import LIBRARY, OPTIMIZER_ENGINES, engine_of, missing_engine

_NULL = logging.getLogger("trainer.sweep.scheduler.silent")
_NULL.addHandler(logging.NullHandler())
_NULL.propagate = False
# Store states W&B's RunState names otherwise (the rest are the same word): stopped, pruned and
# cancelled (by the sweep's owner): killed.
RUN_STATE = {"queued": "PENDING", "stopped": "KILLED", "pruned": "KILLED", "cancelled": "KILLED"}


def run_state(state: str) -> Any:
    """W&B's RunState of a store state."""
    # lazy: wandb costs 0.3 s at start-up; only sweeps with scheduler.engine optuna or ax use it
    from wandb.sdk.sweeps import RunState

    return RunState[RUN_STATE.get(state, state.upper())]


@dataclass(frozen=True)
class TrialView:
    """A run as its optimizer hears of it: store id, parameters, store state, epoch history."""

    run_id: str
    params: dict[str, Any]
    state: str
    history: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def quiet(log: logging.Logger) -> Iterator[None]:
    """Warnings and W&B's terminal notes raised inside the library go to `log`, not the terminal."""
    # lazy: wandb, as in run_state()
    import wandb

    def note(string: str = "", *args: Any, **kwargs: Any) -> None:  # wandb.termwarn's shape
        log.warning("%s", string)  # whether or not wandb is silent (WANDB_SILENT, a run's)

    buffer = io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stderr(buffer),
        mock.patch.object(wandb, "termwarn", note),
    ):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for item in caught:
                log.warning("%s: %s", item.category.__name__, item.message)
            for line in buffer.getvalue().splitlines():
                log.warning("%s", line.replace("wandb: WARNING ", "").strip())


@contextlib.contextmanager
def library_logs(engine: str, handler: logging.Handler) -> Iterator[None]:
    """The engine library's log records go to `handler` only (while W&B's routing is not on)."""
    logger = logging.getLogger(LIBRARY[engine])
    saved = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [handler], False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved


def scheduler_command(path: str, batch_size: int) -> list[str]:
    """The `wandb sweep-scheduler` command that drives a server sweep's `scheduler:` block."""
    return [sys.executable, "-m", "wandb", "sweep-scheduler", "--batch-size", str(batch_size), path]


def sweep_info(config: dict[str, Any], sweep_id: str) -> Any:
    """W&B's SweepInfo of a local sweep (offline: no entity, project or controller run)."""
    # lazy: wandb, as in run_state()
    from wandb.sdk.sweeps import SweepInfo

    name = str(config.get("name") or sweep_id)
    return SweepInfo(
        id=sweep_id, name=name, entity="", project="", config=config, controller_run_name=""
    )


def build(config: dict[str, Any], sweep_id: str, log: logging.Logger) -> Any:
    """W&B's optimizer for the sweep (`make_optimizer`), its library's output routed to `log`;
    a TrainerError gives W&B's reason when it cannot be built."""
    # lazy: wandb, as in run_state()
    import wandb
    from wandb.sdk.sweeps.scheduler.optimizer import make_optimizer

    engine = engine_of(config)
    problem = missing_engine(engine)
    if problem:
        raise TrainerError(problem)
    handler = _Forward(log)
    with quiet(log):
        importlib.import_module(LIBRARY[engine])  # its import-time notes go to the log too
        with library_logs(engine, handler):
            try:
                return make_optimizer(sweep_info(config, sweep_id))
            except (wandb.Error, ValueError, TypeError) as err:
                raise TrainerError(
                    f"scheduler.engine: {engine}: W&B's optimizer refuses this sweep: {err}"
                ) from None


class _Forward(logging.Handler):
    """Hands the library's records to our logger (its file), formatted once there."""

    def __init__(self, log: logging.Logger) -> None:
        super().__init__(logging.INFO)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log.log(record.levelno, "%s", record.getMessage())


def _with_metrics(view: TrialView) -> Any:
    """W&B's RunWithMetrics of a run: its history with `_step` = epoch index, and a summary
    that holds each key's last value, as a W&B run summary does."""
    # lazy: wandb, as in run_state()
    from wandb.sdk.sweeps.scheduler.optimizer import RunConfig, RunWithMetrics

    history = [{**row, "_step": step} for step, row in enumerate(view.history)]
    summary: dict[str, Any] = {}
    for row in history:
        summary.update(row)
    return RunWithMetrics(
        config=RunConfig.from_values(dict(view.params)),
        state=run_state(view.state),
        wandb_run_id=view.run_id,
        summary_metrics=summary,
        history_metrics=history,
    )


class OptimizerSession:
    """One W&B optimizer of one sweep, driven by the process holding the sweep's lease."""

    def __init__(self, config: dict[str, Any], sweep_id: str, log: logging.Logger) -> None:
        self.log = log
        self._optimizer = build(config, sweep_id, log)
        self._restore = self._optimizer.route_library_logs(_Forward(log))

    def ask(self, n: int) -> list[tuple[str, dict[str, Any]]] | None:
        """Up to `n` (optimizer id, parameters); [] when the search is over, None: not now."""
        with quiet(self.log):
            suggested = self._optimizer.ask_n_runs(n)
        if suggested is None:
            return None
        return [(str(s.run_id), plain(s.config.flat_dict())) for s in suggested]

    def tell(self, optimizer_id: str, view: TrialView) -> None:
        """A tracked run's latest history and state (finalised by the optimizer once terminal)."""
        with quiet(self.log):
            self._optimizer.tell_run(optimizer_id, _with_metrics(view))

    def prune(self, tracked: list[tuple[str, TrialView]]) -> list[str]:
        """The optimizer ids of running runs the optimizer's pruner stops now."""
        if not tracked:
            return []
        with quiet(self.log):
            pruned = self._optimizer.prune_runs(
                [i for i, _ in tracked], [_with_metrics(v) for _, v in tracked]
            )
        return [str(i) for i in pruned]

    def adopt(self, view: TrialView) -> str | None:
        """Track a queued or running run this optimizer did not suggest; its new id or None."""
        # lazy: wandb, as in run_state()
        from wandb.sdk.sweeps.scheduler.optimizer import Run, RunConfig

        run = Run(
            config=RunConfig.from_values(dict(view.params)),
            state=run_state(view.state),
            wandb_run_id=view.run_id,
        )
        with quiet(self.log):
            adopted = self._optimizer.tell_existing_active_run(run)
        return None if adopted is None else str(adopted)

    def tell_finished(self, view: TrialView) -> None:
        """Teach the optimizer a run that ended before it existed (a rebuild from the store)."""
        with quiet(self.log):
            self._optimizer.tell_existing_finished_run(_with_metrics(view))

    def should_terminate(self) -> bool:
        """Whether a terminator from the user's study factory ends the sweep."""
        with quiet(self.log):
            return bool(self._optimizer.should_terminate_sweep())

    def close(self) -> None:
        self._restore()


# What W&B refuses, asked before launch (each takes the log its notes go to) ------------------
def mapping_refusals(config: dict[str, Any], log: logging.Logger) -> dict[str, str]:
    """Parameter -> W&B's reason, for each parameter W&B's mapping to the engine refuses."""
    engine = engine_of(config)
    if engine == "optuna":
        # lazy: wandb, as in run_state()
        from wandb.sdk.sweeps.scheduler.optuna import sweep_parameter_to_distribution as to_optuna

        def mapping(name: str, spec: Any) -> Any:
            return to_optuna(spec)
    elif engine == "ax":
        # optional: ax (the [ax] extra); W&B's module raises without it
        from wandb.sdk.sweeps.scheduler.ax import sweep_parameter_to_parameter as mapping
    else:
        return {}
    with quiet(_NULL):  # the library's import-time notes are not the mapping's
        importlib.import_module(LIBRARY[engine])
    refused = {}
    for name, spec in (config.get("parameters") or {}).items():
        try:
            with quiet(log):
                mapping(name, spec)
        except (ValueError, KeyError, TypeError) as err:
            refused[name] = str(err)
    return refused


def source_refusals(config: dict[str, Any], log: logging.Logger) -> list[str]:
    """W&B's reasons against `scheduler.search_space` / `scheduler.optimizer` in `source`: a
    missing function, one that takes or returns the wrong thing, or one that raises."""
    # lazy: wandb, as in run_state()
    from wandb.sdk.sweeps.scheduler.client import load_optimizer_config
    from wandb.sdk.sweeps.scheduler.optuna import load_trial_constructor

    scheduler, engine = config["scheduler"], engine_of(config)
    source, checks = scheduler.get("source", ""), []
    if scheduler.get("search_space") and engine == "optuna":
        name = scheduler["search_space"]
        checks.append(("scheduler.search_space", lambda: load_trial_constructor(source, name)))
    if scheduler.get("optimizer") and engine in OPTIMIZER_ENGINES:
        with quiet(log):
            kind = importlib.import_module(LIBRARY[engine])
        kind = kind.Study if engine == "optuna" else kind.Client
        info = sweep_info(config, "check")
        call = lambda: load_optimizer_config(source, scheduler["optimizer"], kind, info)  # noqa: E731
        checks.append(("scheduler.optimizer", call))
    reasons = []
    for key, check in checks:
        try:
            with quiet(log), library_logs(engine, _Forward(log)):
                check()
        except ValueError as err:
            reasons.append(f"{key}: {err}")
        except Exception as err:  # the user's own code raised: in its own words
            reasons.append(f"{key}: calling it raised {type(err).__name__}: {err}")
    return reasons


def sample_search_space(
    config: dict[str, Any], log: logging.Logger
) -> tuple[dict[str, Any], list[str]]:
    """What the define-by-run function returns for one throwaway trial (Hydra keys -> values),
    and the names of the trial.suggest_* calls it made."""
    # lazy: wandb, as in run_state()
    from wandb.sdk.sweeps.scheduler.client import load_source_object

    scheduler = config["scheduler"]
    constructor = load_source_object(scheduler["source"], scheduler["search_space"])
    with quiet(log):
        optuna = importlib.import_module("optuna")
        with library_logs("optuna", _Forward(log)):
            trial = optuna.create_study().ask()
            return plain(dict(constructor(trial))), list(trial.params)


def build_refusal(config: dict[str, Any], log: logging.Logger) -> str | None:
    """W&B's reason against building the sweep's optimizer (e.g. a study whose direction is not
    the metric's goal), or None when it builds."""
    try:
        OptimizerSession(config, "check", log).close()
    except TrainerError as err:
        return str(err)
    return None
