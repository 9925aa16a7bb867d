"""A scale model of the sweep store: many simulated agents that train nothing drive the real
`SweepStore` through the calls one local agent makes per trial, replayed faster than real time,
on PostgreSQL (a pgserver in a temporary folder) and on the embedded SQLite sweep.db.

One simulated agent makes the store calls of `LocalAgent._run` / `_run_trial` / `_watch` /
`_record` with the classic engine (trainer.sweep.agents.local_agent, trainer.sweep.search.
dispatch.ClassicEngine), in their order:

- hand-out: `claim(...)` (in its transaction: the store's copy of the runs brought up to date,
  trainer.sweep.store.known_runs; the lost-run look `_mark_lost`, the agent's slot beat, the
  sweep's state, the proposal, the insert with its ticket);
- trial started: `update(run_id, pid=, run_dir=, log_path=, started_at=)`;
- every `--heartbeat-s` (the agent's HEARTBEAT_S by default) while the trial runs:
  `heartbeat(run_id)`;
- every epoch (`--trial-s` / `--epochs`): the report, `add_metrics(run_id, [row], epoch)`, one
  row of the keys the trainer logs;
- hyperband's stop check as ClassicEngine.should_stop makes it with `early_terminate`: every
  run read (`runs()`), then `stop_requested(run_id)`. The agent checks at every poll
  (POLL_S, 0.25 s); `--stop-check poll` replays that cadence, `epoch` (the default) checks
  after each report, the only moments the decision can change, `off` never. The engine's own
  decision (W&B's hyperband over the runs read) is Python of the agent, not the store's: it is
  left out and no stop is requested, so every trial runs its epochs;
- end: `stop_requested(run_id)`, then `update_held(run_id, pid, state="finished", exit_code=0,
  ended_at=, summary=, log_tail=None)`.

The proposal is a cheap counter (the engine's suggestion is again the agent's Python, not the
store's work). Time is compressed by `--speedup`: a 60 s trial of 10 epochs is replayed in 2 s at
30x, every heartbeat and report in proportion, so the store sees the load of `speedup` times as
many real agents. Agents start spread over one (compressed) trial, as agents of a running sweep
are, and each round runs `--duration-s`; at its end the agents finish their trial at once (final
state written) and claim nothing more. Hand-outs are the claims begun inside the round. A claim
reads only the runs that changed since its store's last look (and the runs that have not ended),
and no history unless the proposal asks for one; `--finished-rows` rounds show whether its cost
still grows with the runs behind it. With a stop check, each worker's agents start with their
copies of the runs read (every history, once per worker, before the round), as agents of a
running sweep have them: the round measures the steady state, not each agent's first read.

Each simulated agent has its own SweepStore, as each real agent (a process) has: one pooled
connection each, so a PostgreSQL round of N agents holds about N connections. PostgreSQL's
default max_connections (100) would refuse the larger rounds, so the benchmark's server is
restarted with max_connections raised to the largest round's agents plus a margin; the output
says so. Agents are threads of a few worker processes (`--processes`); a thread's agent is the
worker's PID to the store's liveness (real agents of one host have one PID each): the lost-run
look skips the claimer's own process's runs and asks psutil about the others.

Keeping the load generator's CPU out of the figures: the database's CPU is read from /proc
(utime + stime of the postmaster and of every backend it forked, the reaped ones through the
postmaster's cutime + cstime) at the round's start and end, and divided by the round's hand-outs;
the workers' own CPU (getrusage) is reported beside it, per hand-out. On SQLite the database runs
inside the agents' processes: its CPU is the client's, and the DB column says n/a. Latencies are
client-side (perf_counter around each store call) and include any wait for the worker's GIL
and the machine's CPUs: read them with the client CPU column. Statements per claim: SQLAlchemy's
`before_cursor_execute` events in the claiming thread (pool pings not included); rows read per
claim: the rows its SELECTs returned (psycopg's row count; sqlite3 gives none: "-").

Per round: hand-outs/s (and the rate the agents would ask for, `agents * speedup / trial-s`),
claim p50/p99/max, heartbeat, report and stop-check p99 (ms), DB and client CPU ms per hand-out,
statements per claim, server connections at the round's end, and duplicates (a run handed out
twice) and losses (a run handed out and not finished with its agent's final state): both must
be 0. `--finished-rows` adds rounds at 256 agents (or the first of `--agents`) whose sweep
starts with that many finished runs, each with its per-epoch history rows, inserted in bulk.

    python -m benchmarks.sweep_scale --publish     # 16..1024 agents, 0 to 100k finished runs
    python -m benchmarks.sweep_scale --agents 16,64 --finished-rows 1000 --duration-s 20
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from benchmarks import destination
from benchmarks.md_table import table
from trainer.sweep.store import tables as t
from trainer.sweep.store.liveness import this_host
from trainer.sweep.store.opening import open_store

REPO = Path(__file__).resolve().parent.parent
POLL_S = 0.25  # trainer.sweep.agents.local_agent.POLL_S: how often the agent checks a trial
HEARTBEAT_S = 2.0  # trainer.sweep.agents.local_agent.HEARTBEAT_S
DEFAULT_MAX_CONNECTIONS = 100
CONNECTION_MARGIN = 32  # the benchmark's own connections and a few spare
METRICS = ("train/loss", "train/acc", "val/loss", "val/acc")
SWITCH_S = 0.0005  # the workers' GIL switch interval (Python's default: 0.005)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--agents", default="16,64,256,1024", help="simulated agents per round")
    p.add_argument("--backends", default="postgresql,sqlite")
    p.add_argument(
        "--finished-rows",
        default="1000,10000,100000",
        help="rounds at 256 agents (or the first --agents) whose sweep holds this many finished "
        "runs with their history first ('' for none)",
    )
    p.add_argument("--duration-s", type=float, default=60.0, help="length of each round")
    p.add_argument("--trial-s", type=float, default=60.0, help="a simulated trial, real time")
    p.add_argument("--epochs", type=int, default=10, help="reports per trial")
    p.add_argument("--heartbeat-s", type=float, default=HEARTBEAT_S, help="real time")
    p.add_argument("--speedup", type=float, default=30.0, help="time compression")
    p.add_argument("--stop-check", choices=("epoch", "poll", "off"), default="epoch")
    p.add_argument("--processes", type=int, default=8, help="worker processes (at most agents)")
    p.add_argument("--storage", default=None, help="a PostgreSQL URL (default: pgserver)")
    destination.add_arguments(p)
    return p.parse_args(argv)


# statements per call: SQLAlchemy's cursor events, counted per thread ---------------------------
_counted = threading.local()


def _count_statements() -> None:

    def before(*_args: Any) -> None:
        _counted.n = getattr(_counted, "n", 0) + 1

    def after(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):  # the rows a read returned
            _counted.rows = getattr(_counted, "rows", 0) + max(cursor.rowcount or 0, 0)

    event.listen(Engine, "before_cursor_execute", before)
    event.listen(Engine, "after_cursor_execute", after)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# the agent side: threads of a worker process ----------------------------------------------------
class SimulatedAgent:
    """One agent's store calls for its trials, timed, until the round's deadline."""

    def __init__(self, store: Any, plan: dict, index: int) -> None:
        self.store, self.plan = store, plan
        self.rng = random.Random(f"{plan['seed']}-{os.getpid()}-{index}")
        self.pid = os.getpid()
        self.times: dict[str, list[float]] = {
            k: [] for k in ("claim", "heartbeat", "report", "stop_check", "finish")
        }
        self.statements: list[int] = []
        self.rows_read: list[int] = []
        self.handed: list[str] = []  # claims begun before the deadline
        self.unfinished: list[str] = []  # handed out, final state not written
        self.errors: list[str] = []

    def _timed(self, kind: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        out = call(*args, **kwargs)
        self.times[kind].append((time.perf_counter() - began) * 1000)
        return out

    def _propose(self, runs: list) -> tuple[dict, None]:
        return {"lr": self.rng.random(), "i": len(runs)}, None

    def run(self) -> None:
        try:
            self._trials()
        except Exception as err:  # reported, never silent
            self.errors.append(f"{type(err).__name__}: {err}")

    def _trials(self) -> None:
        plan = self.plan
        scale = 1.0 / plan["speedup"]
        trial, beat_s = plan["trial_s"] * scale, plan["heartbeat_s"] * scale
        epoch_s, poll_s = trial / plan["epochs"], POLL_S * scale
        deadline = plan["deadline"]
        _sleep_until(plan["go"] + self.rng.uniform(0, trial))  # agents of a running sweep
        while time.time() < deadline:
            _counted.n = _counted.rows = 0
            run = self._timed(
                "claim",
                self.store.claim,
                self._propose,
                new_id=lambda: uuid.uuid4().hex[:12],
                agent_pid=self.pid,
            )
            self.statements.append(_counted.n)
            self.rows_read.append(_counted.rows)
            if run is None or not hasattr(run, "id"):
                self.errors.append(f"claim returned {run!r}")
                return
            self.handed.append(run.id)
            self.unfinished.append(run.id)
            started = time.time()
            self.store.update(
                run.id,
                pid=self.pid,
                run_dir=f"/runs/{run.id}",
                log_path=f"/logs/{run.id}.log",
                started_at=started,
            )
            next_beat, next_poll, epoch = started + beat_s, started + poll_s, 0
            while epoch < plan["epochs"]:
                next_epoch = started + (epoch + 1) * epoch_s
                polls = plan["stop_check"] == "poll"
                now_due = min(next_epoch, next_beat, next_poll if polls else next_epoch)
                if now_due >= deadline:
                    _sleep_until(deadline)
                    break
                _sleep_until(now_due)
                if now_due == next_epoch:
                    row = {k: self.rng.random() for k in METRICS} | {"epoch": epoch}
                    self._timed("report", self.store.add_metrics, run.id, [row], epoch)
                    epoch += 1
                    if plan["stop_check"] == "epoch":
                        self._stop_check(run.id)
                elif now_due == next_beat:
                    self._timed("heartbeat", self.store.heartbeat, run.id)
                    next_beat += beat_s
                else:
                    self._stop_check(run.id)
                    next_poll += poll_s
            began = time.perf_counter()
            self.store.stop_requested(run.id)
            held = self.store.update_held(
                run.id,
                self.pid,
                state="finished",
                exit_code=0,
                ended_at=time.time(),
                summary={"status": "finished", "epochs": epoch},
                log_tail=None,
            )
            self.times["finish"].append((time.perf_counter() - began) * 1000)
            if held:
                self.unfinished.remove(run.id)

    def _stop_check(self, run_id: str) -> None:
        def check() -> bool:
            self.store.runs()  # what the engine decides from
            return self.store.stop_requested(run_id)

        self._timed("stop_check", check)


def _sleep_until(when: float) -> None:
    left = when - time.time()
    if left > 0:
        time.sleep(left)


def worker() -> None:
    """Read the plan (a JSON line), open a store per agent, say `ready`, wait for the round's
    start (a JSON line) and print what every agent did as JSON."""

    plan = json.loads(sys.stdin.readline())
    _count_statements()
    # a thread waiting for the GIL gets it within 0.5 ms, not 5: an agent holding the sweep's
    # lock is not held up by its worker's other agents for long (real agents share no GIL)
    sys.setswitchinterval(SWITCH_S)
    stores = [
        open_store(plan["sweep_dir"], plan["url"] or None, plan["sweep_id"])
        for _ in range(plan["agents"])
    ]
    if plan["stop_check"] != "off":  # as running agents: their copies hold every history
        stores[0].runs()
        for store in stores[1:]:
            store.known.copy_from(stores[0].known)
    print("ready", flush=True)
    plan.update(json.loads(sys.stdin.readline()))
    agents = [SimulatedAgent(store, plan, i) for i, store in enumerate(stores)]
    threads = [threading.Thread(target=a.run, daemon=True) for a in agents]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    for thread in threads:
        thread.start()
    _sleep_until(plan["deadline"])
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)  # the round's own CPU, not the wind-down
    for thread in threads:
        thread.join(timeout=600)
    for store in stores:
        store.close()
    out = {
        "times": {k: [x for a in agents for x in a.times[k]] for k in agents[0].times},
        "statements": [x for a in agents for x in a.statements],
        "rows_read": [x for a in agents for x in a.rows_read],
        "handed": [x for a in agents for x in a.handed],
        "unfinished": [x for a in agents for x in a.unfinished],
        "errors": [x for a in agents for x in a.errors],
        "client_cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
    }
    print(json.dumps(out), flush=True)


# the server's CPU ------------------------------------------------------------------------------
def _ticks(pid: int, children: bool) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])  # utime, stime
    return own + (int(fields[13]) + int(fields[14]) if children else 0)  # reaped children's


def server_cpu_s(postmaster: int | None) -> float | None:
    """CPU seconds the PostgreSQL server has used: the postmaster (with its reaped children)
    and every process it forked that still runs."""
    if postmaster is None:
        return None
    total = _ticks(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                total += _ticks(int(entry.name), children=True)
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _connections(url: str) -> int | None:

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as db:
        n = db.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
        ).scalar()
    engine.dispose()
    return int(n) - 1  # this one


@contextlib.contextmanager
def postgres(url: str | None, max_connections: int) -> Iterator[dict]:
    """The server to measure: given (`url`), or a pgserver started now with `max_connections`
    (restarted with it when above the default) and removed after."""
    if url is not None:
        yield {"url": url, "postmaster": None, "version": "PostgreSQL (given URL)", "note": ""}
        return
    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR as root
        warnings.simplefilter("ignore")
        # optional: pgserver is the dev extra's, and reads its runtime folder on import
        import pgserver
        from pgserver._commands import pg_ctl

        folder = Path(tempfile.mkdtemp(prefix="sweep-scale-pg-"))
        server = pgserver.get_server(folder, cleanup_mode="stop")
        server.psql("CREATE DATABASE bench;")
        uri = server.get_uri("bench")
    note = ""
    try:
        if max_connections > DEFAULT_MAX_CONNECTIONS:
            server.psql(f"ALTER SYSTEM SET max_connections = {max_connections};")
            host = uri.split("host=", 1)[1].split("&", 1)[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = ["-w", "-m", "fast", "-o", '-h ""', "-o", f"-k {host}"]
                args += ["-l", str(folder / "log"), "restart"]
                pg_ctl(args, pgdata=folder, user=server.system_user, timeout=120)
            note = (
                f"max_connections raised from {DEFAULT_MAX_CONNECTIONS} to {max_connections} "
                "(one connection per simulated agent, as one per real agent)"
            )

        engine = create_engine(uri.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.connect() as db:
            version = db.execute(text("SHOW server_version")).scalar()
            shown = db.execute(text("SHOW max_connections")).scalar()
        engine.dispose()
        postmaster = int((folder / "postmaster.pid").read_text().split()[0])
        yield {
            "url": uri,
            "postmaster": postmaster,
            "version": f"PostgreSQL {version} (pgserver), max_connections {shown}",
            "note": note,
        }
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
            if (folder / "postmaster.pid").exists():  # restarted by us: not pgserver's
                with contextlib.suppress(Exception):
                    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=folder, user=server.system_user)
        shutil.rmtree(folder, ignore_errors=True)


# the rounds ------------------------------------------------------------------------------------
def prefill(store: Any, rows: int, epochs: int) -> float:
    """`rows` finished runs, each with `epochs` history rows, in bulk (PostgreSQL: COPY); the
    seconds it took."""

    began, host, rng = time.perf_counter(), this_host(), random.Random(rows)
    chunk = max(1, 20_000 // max(1, epochs))
    with store.transaction() as db:
        for start in range(0, rows, chunk):
            runs, metrics = [], []
            for i in range(start, min(rows, start + chunk)):
                run_id, now = f"done{i:07d}", time.time()
                runs.append(
                    {
                        "id": run_id,
                        "state": "finished",
                        "params": json.dumps({"lr": rng.random(), "i": i}),
                        "agent_pid": 1,
                        "exit_code": 0,
                        "run_dir": f"/runs/{run_id}",
                        "log_path": f"/logs/{run_id}.log",
                        "summary": json.dumps({"status": "finished", "epochs": epochs}),
                        "created_at": now,
                        "started_at": now,
                        "ended_at": now,
                        "heartbeat_at": now,
                        "host": host,
                        "reports": epochs,
                    }
                )
                for e in range(epochs):
                    data = {k: rng.random() for k in METRICS} | {"epoch": e}
                    metrics.append({"run_id": run_id, "step": e, "data": json.dumps(data)})
            _bulk(db, store.storage.schema, t.runs, runs)
            _bulk(db, store.storage.schema, t.metrics, metrics)
    if not store.storage.is_sqlite:  # the planner's statistics, as a store grown slowly has them
        with store.engine.connect() as db:
            db.execution_options(isolation_level="AUTOCOMMIT")
            for table in (t.runs, t.metrics):
                db.exec_driver_sql(f"ANALYZE {store.storage.schema}.{table.name}")
    return time.perf_counter() - began


def _bulk(db: Any, schema: str | None, table: Any, rows: list[dict]) -> None:
    """Insert `rows` into `table`: PostgreSQL's COPY (psycopg), else an executemany."""
    if not rows:
        return
    if schema is None:
        db.execute(table.insert(), rows)
        return
    names = list(rows[0])
    cursor = db.connection.driver_connection.cursor()
    with cursor.copy(f"COPY {schema}.{table.name} ({', '.join(names)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[n] for n in names])


def one_round(
    backend: str, server: dict, agents: int, finished: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:

    url = server["url"] if backend == "postgresql" else ""
    sweep_id = "s" + uuid.uuid4().hex[:8]
    sweep_dir = work / sweep_id
    store = open_store(sweep_dir, url or None, sweep_id)
    store.set(
        "config",
        {
            "method": "random",
            "metric": {"name": "val/acc", "goal": "maximize"},
            "early_terminate": {"type": "hyperband", "min_iter": 3},
            "parameters": {"lr": {"min": 0.0, "max": 1.0}},
        },
    )
    prefill_s = prefill(store, finished, args.epochs) if finished else 0.0
    procs_n = max(1, min(args.processes, agents))
    shares = [agents // procs_n + (i < agents % procs_n) for i in range(procs_n)]
    argv = [sys.executable, "-m", "benchmarks.sweep_scale", "--worker"]
    opening = time.perf_counter()
    procs = []
    for share in shares:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        plan = {
            "url": url,
            "sweep_dir": str(sweep_dir),
            "sweep_id": sweep_id,
            "agents": share,
            "trial_s": args.trial_s,
            "epochs": args.epochs,
            "heartbeat_s": args.heartbeat_s,
            "speedup": args.speedup,
            "stop_check": args.stop_check,
            "seed": sweep_id,
        }
        proc.stdin.write(json.dumps(plan) + "\n")
        proc.stdin.flush()
        procs.append(proc)
    for proc in procs:
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise SystemExit(f"a worker failed to open its stores (exit {proc.wait()})")
    open_s = time.perf_counter() - opening  # workers started, every agent's store open
    go = time.time() + 0.5
    deadline = go + args.duration_s
    for proc in procs:
        proc.stdin.write(json.dumps({"go": go, "deadline": deadline}) + "\n")
        proc.stdin.flush()
    _sleep_until(go)
    cpu0 = server_cpu_s(server["postmaster"]) if backend == "postgresql" else None
    _sleep_until(go + args.duration_s / 2)  # every agent started: their connections open
    connections = _connections(url) if backend == "postgresql" else None
    _sleep_until(deadline)
    cpu1 = server_cpu_s(server["postmaster"]) if backend == "postgresql" else None
    outs = []
    for proc in procs:
        text_out, _ = proc.communicate(timeout=900)
        outs.append(json.loads(text_out.strip().splitlines()[-1]))
    handed = [x for o in outs for x in o["handed"]]
    given = set(handed)
    not_finished = {r.id for r in store.runs() if r.id in given and r.state != "finished"}
    store.close()
    times = {k: [x for o in outs for x in o["times"][k]] for k in outs[0]["times"]}
    statements = [x for o in outs for x in o["statements"]]
    rows_read = [x for o in outs for x in o["rows_read"]]
    client_cpu = sum(o["client_cpu_s"] for o in outs)
    n = len(handed)
    per = lambda s: None if s is None or not n else 1000 * s / n  # noqa: E731
    return {
        "backend": backend,
        "agents": agents,
        "finished_rows": finished,
        "processes": procs_n,
        "duration_s": args.duration_s,
        "offered_per_s": agents * args.speedup / args.trial_s,
        "handouts": n,
        "handouts_per_s": n / args.duration_s,
        "claim_p50_ms": _percentile(times["claim"], 0.5),
        "claim_p99_ms": _percentile(times["claim"], 0.99),
        "claim_max_ms": max(times["claim"], default=None),
        "heartbeat_p99_ms": _percentile(times["heartbeat"], 0.99),
        "report_p99_ms": _percentile(times["report"], 0.99),
        "stop_check_p99_ms": _percentile(times["stop_check"], 0.99),
        "finish_p99_ms": _percentile(times["finish"], 0.99),
        "calls": {k: len(v) for k, v in times.items()},
        "db_cpu_ms_per_handout": per(None if cpu0 is None else cpu1 - cpu0),
        "client_cpu_ms_per_handout": per(client_cpu),
        "statements_per_claim": (sum(statements) / len(statements)) if statements else None,
        "rows_read_per_claim": (sum(rows_read) / len(rows_read))
        if rows_read and backend == "postgresql"
        else None,
        "connections": connections,  # mid-round, the server's client backends
        "duplicates": n - len(set(handed)),
        "losses": len({x for o in outs for x in o["unfinished"]} | not_finished),
        "errors": [x for o in outs for x in o["errors"]][:10],
        "prefill_s": prefill_s,
        "open_s": open_s,
        "exit_codes": [p.returncode for p in procs],
    }


HEAD = [
    "backend",
    "agents",
    "finished rows",
    "asked/s",
    "hand-outs/s",
    "claim p50 ms",
    "claim p99 ms",
    "claim max ms",
    "heartbeat p99 ms",
    "report p99 ms",
    "stop check p99 ms",
    "DB CPU ms/hand-out",
    "client CPU ms/hand-out",
    "statements/claim",
    "rows read/claim",
    "connections",
    "duplicates",
    "losses",
]


def _row(r: dict) -> dict:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}" if v < 100 else f"{v:.0f}"

    return {
        "backend": "PostgreSQL" if r["backend"] == "postgresql" else "SQLite",
        "agents": r["agents"],
        "finished rows": f"{r['finished_rows']:,}",
        "asked/s": f"{r['offered_per_s']:.1f}",
        "hand-outs/s": f"{r['handouts_per_s']:.1f}",
        "claim p50 ms": ms(r["claim_p50_ms"]),
        "claim p99 ms": ms(r["claim_p99_ms"]),
        "claim max ms": ms(r["claim_max_ms"]),
        "heartbeat p99 ms": ms(r["heartbeat_p99_ms"]),
        "report p99 ms": ms(r["report_p99_ms"]),
        "stop check p99 ms": ms(r["stop_check_p99_ms"]),
        "DB CPU ms/hand-out": "n/a (in the client)"
        if r["backend"] == "sqlite"
        else ms(r["db_cpu_ms_per_handout"]),
        "client CPU ms/hand-out": ms(r["client_cpu_ms_per_handout"]),
        "statements/claim": "-"
        if r["statements_per_claim"] is None
        else f"{r['statements_per_claim']:.1f}",
        "rows read/claim": "-"
        if r.get("rows_read_per_claim") is None
        else f"{r['rows_read_per_claim']:.1f}",
        "connections": "-" if r["connections"] is None else r["connections"],
        "duplicates": r["duplicates"],
        "losses": r["losses"],
    }


def markdown(rounds: list[dict], meta: dict) -> str:
    lines = [
        "# Sweep store at scale: simulated agents",
        "",
        f"{meta['machine']}; {meta['postgres']}; SQLAlchemy {meta['sqlalchemy']}; load average "
        f"{meta['load_start']} at start, {meta.get('load_end')} at end. Each simulated agent "
        f"replays a {meta['trial_s']:g} s trial of {meta['epochs']} epochs with a heartbeat every "
        f"{meta['heartbeat_s']:g} s and the stop check at each {meta['stop_check']}, "
        f"{meta['speedup']:g}x faster than real time, through its own SweepStore; rounds of "
        f"{meta['duration_s']:g} s. asked/s: the hand-outs the agents would take if every claim "
        "were instant. DB CPU: the PostgreSQL server's processes (/proc); SQLite's runs in the "
        "agents' processes. Client CPU: the simulated agents' own (the load generator)."
        + (f" {meta['note']}." if meta.get("note") else ""),
        "",
        *table([_row(r) for r in rounds], HEAD),
    ]
    errors = [_error_line(r, e) for r in rounds for e in r["errors"]]
    if errors:
        counted = collections.Counter(errors)
        lines += ["", "Errors in the agents (an agent stops at its first):"]
        lines += [f"- {n} x {text}" for text, n in counted.most_common()]
    return "\n".join(lines) + "\n"


def _error_line(round_: dict, error: str) -> str:
    """One line for an agent's error: its round, and the error's first line (SQLAlchemy adds the
    statement and a link below it)."""
    where = f"{round_['backend']}, {round_['agents']} agents, {round_['finished_rows']:,} finished"
    return f"{where}: {error.splitlines()[0]}"


def _meta(args: argparse.Namespace, server: dict) -> dict[str, Any]:

    return {
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "postgres": server["version"],
        "note": server["note"],
        "sqlalchemy": sqlalchemy.__version__,
        "trial_s": args.trial_s,
        "epochs": args.epochs,
        "heartbeat_s": args.heartbeat_s,
        "speedup": args.speedup,
        "stop_check": args.stop_check,
        "duration_s": args.duration_s,
        "load_start": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    out = destination.folder(args)
    counts = [int(n) for n in args.agents.split(",") if n]
    filled = [int(n) for n in args.finished_rows.split(",") if n]
    backends = [b for b in args.backends.split(",") if b]
    at = 256 if 256 in counts else counts[0]
    plan = [(a, 0) for a in counts] + [(at, f) for f in filled]
    needs = max(counts) + CONNECTION_MARGIN
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        server = {"url": "", "postmaster": None, "version": "PostgreSQL not measured", "note": ""}
        if "postgresql" in backends:
            server = stack.enter_context(postgres(args.storage, max(needs, 100)))
        meta = _meta(args, server)
        rounds: list[dict] = []
        for backend in backends:
            for agents, finished in plan:
                rounds.append(one_round(backend, server, agents, finished, args, Path(tmp)))
                print(markdown(rounds[-1:], meta).splitlines()[-1], flush=True)
    meta["load_end"] = round(os.getloadavg()[0], 2)
    doc = {"meta": meta, "rounds": rounds}
    (out / "sweep_scale.json").write_text(json.dumps(doc, indent=2))
    (out / "sweep_scale.md").write_text(markdown(rounds, meta))
    print(markdown(rounds, meta))
    return doc


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker()
    else:
        main()
