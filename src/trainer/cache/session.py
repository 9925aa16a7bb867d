"""A run's compile-cache session, the one interface training calls. Before anything compiles
(Inductor already pointed at the cache dir): put this machine's part of the sweep's bundle in
place and watch which cache entries the run touches. When the run ends: add what the bundle
lacks, record the workload, and say why an expected cache hit missed (the key part that
differs); then the hooks the run registered (compile.trace's report) run."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.cache import entries
from trainer.cache.artifact import ArtifactBundle, unavailable
from trainer.cache.bundle import Bundle, BundleLayout
from trainer.cache.env import WANDB, bundle_setting
from trainer.cache.key import describe, differences, key_id, machine_key
from trainer.cache.workload import label, workload, workload_id
from trainer.config.schema import TrainConfig
from trainer.outputs.layout import RunLayout

log = logging.getLogger(__name__)


@dataclass
class CacheSession:
    """What one run puts in place, touches and adds; `close` reports it (summary.json)."""

    root: Path | None  # the cache dir (compile.cache_dir); None: torch's default, not bundled
    layout: RunLayout
    conf: TrainConfig
    is_main: bool = True
    key: dict[str, Any] = field(default_factory=dict)
    work: dict[str, Any] = field(default_factory=dict)
    bundle: Bundle | None = None  # a folder bundle (a local sweep's, TRAINER_CACHE_BUNDLE)
    remote: Any = None  # trainer.cache.artifact.ArtifactBundle (W&B artifacts)
    pulled: int = 0  # files put in place from the bundle
    pull_s: float = 0.0  # seconds it took (download included)
    expected: str | None = None  # "bundle" / "cache": had this workload for this key before
    elsewhere: list[str] = field(default_factory=list)  # key parts of the closest other machine
    notice: str | None = None
    report: dict[str, Any] | None = None
    on_close: list[Callable[[], Any]] = field(default_factory=list)  # run once, at close

    @property
    def active(self) -> bool:
        return self.root is not None and not self.conf.compile.disable

    @property
    def local(self) -> Bundle:
        """The cache dir's own records (its files are the cache dir's)."""
        return Bundle(BundleLayout(self.root, in_cache=True))  # type: ignore[arg-type]

    @property
    def ids(self) -> tuple[str, str]:
        return key_id(self.key), workload_id(self.work)


def open_session(
    conf: TrainConfig, layout: RunLayout, device: Any, root: Path | None, *, is_main: bool = True
) -> CacheSession:
    """Set up the run's compile cache in `root` (the cache dir Inductor was pointed at; None:
    torch's default) before anything compiles (see the module)."""
    entries.stop_watching()  # a previous run of this process (tests, multiruns) is over
    session = CacheSession(root, layout, conf, is_main)
    if conf.compile.disable or session.root is None:
        return session
    session.key, session.work = machine_key(device), workload(conf)
    start = time.perf_counter()
    _pull(session)
    session.pull_s = time.perf_counter() - start
    if session.notice and is_main:
        log.warning(session.notice)
    entries.start_watching(session.root)
    return session


def _recorded(bundle: Bundle, kid: str, wid: str) -> list[dict[str, Any]]:
    return [r for r in bundle.records(kid) if r.get("workload_id") == wid]


def _pull(session: CacheSession) -> None:
    kid, wid = session.ids
    session.expected = "cache" if _recorded(session.local, kid, wid) else None
    conf = session.conf
    where = bundle_setting(conf.logger.mode, conf.logger.enabled)
    if where == WANDB:
        session.remote = ArtifactBundle.from_env(conf.logger)
        try:
            session.pulled, other = session.remote.fetch(kid, wid, session.local)
        except unavailable() as err:
            session.notice = f"compile cache: W&B artifacts unavailable, compiling without ({err})"
            return
        session.expected = "bundle" if session.remote.fetched else session.expected
        session.elsewhere = differences(other, session.key) if other else []
        return
    if where is None:
        return
    session.bundle = Bundle(BundleLayout(where))
    keys = session.bundle.parts()
    if kid in keys:
        session.pulled = session.bundle.put_in_place(kid, session.local)
        if _recorded(session.bundle, kid, wid):
            session.expected = "bundle"
    others = {k: v for k, v in keys.items() if k != kid}
    having = [v for k, v in others.items() if _recorded(session.bundle, k, wid)]
    if having:
        session.elsewhere = min((differences(k, session.key) for k in having), key=len)
    if others and kid not in keys:
        closest = min((differences(k, session.key) for k in having or others.values()), key=len)
        session.notice = (
            f"compile cache: ignoring the bundle in {where}: it holds {len(others)} part(s) for "
            f"other machines ({'; '.join(closest)}), none for this one ({describe(session.key)})"
        )


def close_session(
    session: CacheSession, stats: dict[str, Any], run: Any = None
) -> dict[str, Any] | None:
    """Stop watching, add what the run touched to the records and the bundle (rank 0), run the
    hooks; the summary's `compile.cache` section (None when nothing was compiled). Runs once:
    later calls return the same report."""
    hooks, session.on_close = session.on_close, []
    if session.report is not None or not session.active:
        for hook in hooks:
            hook()
        return session.report
    touched = entries.stop_watching()
    for hook in hooks:
        hook()
    kid, wid = session.ids
    files = entries.files_of(touched, entries.cache_files(session.root))  # type: ignore[arg-type]
    record = {
        "workload": session.work,
        "workload_id": wid,
        "label": label(session.work),
        "run": os.environ.get("WANDB_RUN_ID") or session.layout.root.name,
    }
    pushed, start = 0, time.perf_counter()
    if session.is_main and files:
        session.local.add(kid, session.key, session.root, files, record)  # type: ignore[arg-type]
        if session.bundle is not None:
            pushed = session.bundle.add(kid, session.key, session.root, files, record)  # type: ignore[arg-type]
        elif session.remote is not None:
            pushed = _publish(session, files, record, run)
    misses = int(stats.get("fxgraph_cache_miss", 0)) + int(stats.get("aot_autograd_cache_miss", 0))
    session.report = {
        "dir": str(session.root),
        "key": kid,
        "workload": wid,
        "bundle": _where(session),
        "pulled": session.pulled,
        "pull_s": session.pull_s,
        "entries": len(touched),
        "pushed": pushed,
        "push_s": time.perf_counter() - start,
        "expected_hit": bool(session.expected or session.elsewhere),
        "miss_reason": miss_reason(session, misses),
        "notice": session.notice,
    }
    return session.report


def _publish(session: CacheSession, files: list[str], record: dict[str, Any], run: Any) -> int:
    """Log the W&B artifact; a server that cannot take it costs the other machines a cold
    compile, not this run: say so."""
    kid = key_id(session.key)
    try:
        return session.remote.publish(kid, session.key, session.root, files, record, run)
    except unavailable() as err:
        log.warning("compile cache: could not log the W&B artifact (%s)", err)
        return 0


def _where(session: CacheSession) -> str | None:
    if session.bundle is not None:
        return str(session.bundle.layout.root)
    return None if session.remote is None else session.remote.describe()


def miss_reason(session: CacheSession, misses: int) -> str | None:
    """Why a run compiled graphs its cache or bundle was expected to hold; None when it missed
    nothing, or nothing was expected."""
    if not misses:
        return None
    if session.expected:
        where = "the sweep's bundle" if session.expected == "bundle" else "this cache dir"
        return (
            f"{misses} graph(s) compiled although {where} holds this workload for this machine "
            f"key ({describe(session.key)}): Inductor's own key differs (the model's code, "
            "torch or Inductor settings changed since it was recorded)"
        )
    if session.elsewhere:
        return (
            f"{misses} graph(s) compiled: the bundle holds this workload only for other "
            f"machines ({'; '.join(session.elsewhere)})"
        )
    return None
