"""The sweep store's hand-out under concurrent agents: `--agents` (1, 4, 16) agent processes
claim runs of one sweep at the same instant through the store's hand-out (`SweepStore.claim`
with a grid-like proposal, then the run marked finished, as an agent does), on the embedded
SQLite sweep.db and on PostgreSQL (`--storage URL`, else a server pgserver starts in a temporary
folder). Per round: hand-out latency (median, p99), runs handed out per second (all agents,
first hand-out to last), and the duplicates (a run handed to two agents) and losses (a planned
run that no agent got, or a row no agent reported) — both must be 0. Writes sweep_store.md and
.json under outputs/benchmarks/ (`--out DIR` elsewhere, `--publish` to benchmarks/results/).

    python -m benchmarks.sweep_store --publish               # the published run, ~2 min on 2 CPUs
    python -m benchmarks.sweep_store --agents 1,4 --runs-per-agent 5    # a check
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import destination

REPO = Path(__file__).resolve().parent.parent
TARGET_P99_MS = 50.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_store", description=__doc__)
    parser.add_argument("--agents", default="1,4,16", help="agent processes per round")
    parser.add_argument("--runs-per-agent", type=int, default=25, help="runs in a round, per agent")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--storage", default=None, help="a PostgreSQL URL (default: pgserver in a temporary folder)"
    )
    destination.add_arguments(parser)
    return parser.parse_args(argv)


# the agent side: one process per agent ---------------------------------------------------------
def worker(url: str, sweep_dir: str, sweep_id: str, cap: int) -> None:
    """Open the store, say `ready`, wait for `go` on stdin, then claim until the sweep has no
    run left; print the ids got and each hand-out's latency (s) as JSON."""
    from trainer.sweep.store.opening import open_store

    store = open_store(sweep_dir, url or None, sweep_id)
    store.runs()  # a connection in the pool, as a running agent has
    print("ready", flush=True)
    sys.stdin.readline()

    def propose(runs):
        return None if len(runs) >= cap else ({"i": len(runs)}, None)

    got, latencies = [], []
    while True:
        began = time.perf_counter()
        run = store.claim(propose, new_id=lambda: uuid.uuid4().hex[:8], agent_pid=os.getpid())
        if run is None:
            break
        latencies.append(time.perf_counter() - began)
        got.append(run.id)
        store.update(run.id, state="finished", ended_at=time.time())
    print(json.dumps({"ids": got, "latencies": latencies}), flush=True)


# the rounds ----------------------------------------------------------------------------------
def one_round(backend: str, url: str, agents: int, per_agent: int, work: Path) -> dict[str, Any]:
    """`agents` processes claim agents * per_agent runs of a new sweep, started together."""
    from trainer.sweep.store.opening import open_store

    sweep_id = "b" + uuid.uuid4().hex[:8]
    sweep_dir = work / sweep_id
    cap = agents * per_agent
    store = open_store(sweep_dir, url or None, sweep_id)
    argv = [sys.executable, "-m", "benchmarks.sweep_store", "--worker"]
    argv += [url, str(sweep_dir), sweep_id, str(cap)]
    procs = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(agents)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    began = time.perf_counter()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [json.loads(proc.communicate(timeout=600)[0]) for proc in procs]
    wall = time.perf_counter() - began
    got = [run_id for out in outs for run_id in out["ids"]]
    rows = {r.id for r in store.runs()}
    store.close()
    latencies = sorted(s * 1000 for out in outs for s in out["latencies"])
    return {
        "backend": backend,
        "agents": agents,
        "runs": cap,
        "handed_out": len(got),
        "duplicates": len(got) - len(set(got)),
        "losses": (cap - len(set(got))) + len(rows - set(got)),
        "median_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "max_ms": latencies[-1],
        "runs_per_s": len(got) / wall,
        "exit_codes": [proc.returncode for proc in procs],
    }


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[tuple[str, str]]:
    """The PostgreSQL URL to measure (given, or a pgserver started now and removed after) and
    the server's version."""
    folder = None
    if url is None:
        with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR as root
            warnings.simplefilter("ignore")
            import pgserver

            folder = Path(tempfile.mkdtemp(prefix="sweep-store-pg-"))
            server = pgserver.get_server(folder, cleanup_mode="stop")
            server.psql("CREATE DATABASE bench;")
            url = server.get_uri("bench")
    try:
        from sqlalchemy import create_engine, text

        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.connect() as db:
            version = db.execute(text("SHOW server_version")).scalar()
        engine.dispose()
        yield url, f"PostgreSQL {version}" + (" (pgserver)" if folder else "")
    finally:
        if folder is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server.cleanup()
            shutil.rmtree(folder, ignore_errors=True)


def markdown(rounds: list[dict], meta: dict) -> str:
    lines = [
        "# Sweep store: hand-out under concurrent agents",
        "",
        f"{meta['machine']}; {meta['postgres']}; SQLAlchemy {meta['sqlalchemy']}, psycopg "
        f"{meta['psycopg']}; load average {meta['load_start']} at start, {meta.get('load_end')} at "
        f"end. Each round: a new sweep, N agent processes started together claim "
        f"{meta['runs_per_agent']} runs each (SweepStore.claim, then the run marked finished). "
        f"Target: p99 under {TARGET_P99_MS:g} ms with 16 agents on PostgreSQL, no duplicate or "
        "lost run in any round.",
        "",
        "| backend | agents | runs | median ms | p99 ms | max ms | runs/s | duplicates | losses |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rounds:
        lines.append(
            f"| {r['backend']} | {r['agents']} | {r['runs']} | {r['median_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['runs_per_s']:.0f} | "
            f"{r['duplicates']} | {r['losses']} |"
        )
    return "\n".join(lines) + "\n"


def _meta(args: argparse.Namespace, version: str) -> dict[str, Any]:
    import psycopg
    import sqlalchemy

    return {
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "postgres": version,
        "sqlalchemy": sqlalchemy.__version__,
        "psycopg": psycopg.__version__,
        "runs_per_agent": args.runs_per_agent,
        "load_start": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    out = destination.folder(args)
    counts = [int(n) for n in args.agents.split(",")]
    backends = args.backends.split(",")
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, postgres(args.storage) as (url, version):
        meta = _meta(args, version)
        for backend in backends:
            for agents in counts:
                target = url if backend == "postgresql" else ""
                rounds.append(one_round(backend, target, agents, args.runs_per_agent, Path(tmp)))
                print(markdown(rounds[-1:], meta).splitlines()[-1], flush=True)
    meta["load_end"] = round(os.getloadavg()[0], 2)
    (out / "sweep_store.json").write_text(json.dumps({"meta": meta, "rounds": rounds}, indent=2))
    (out / "sweep_store.md").write_text(markdown(rounds, meta))
    print(markdown(rounds, meta))
    return {"meta": meta, "rounds": rounds}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
