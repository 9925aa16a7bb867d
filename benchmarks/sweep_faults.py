"""Fault injection: a 3-point grid run by 2 agents, and mid-trial one way a cluster ends a job:
`scontrol requeue` of an agent's job (SLURM's preemption with PreemptMode=REQUEUE: SIGTERM, then
back in the queue), `scancel --signal=KILL` of one job (not requeued), the node set DOWN and
back, `slurmctld` restarted, a job's time limit cut short (no warning signal), and SIGKILL of a
local agent and its trial (no SLURM). For each fault and store (SQLite, PostgreSQL): grid points
finished exactly once / lost / trained twice from scratch, the sweep command's exit code, and
the seconds from the fault to the interrupted run training again. Writes sweep_faults.md and
.json under outputs/benchmarks/ (`--out DIR` elsewhere, `--publish` to benchmarks/results/).
`--method pbt` runs a PBT population of 3 members instead of the grid (sweep_faults_pbt.md):
members finished exactly once, each with a lineage entry for every epoch.

    python -m benchmarks.sweep_faults [--faults requeue,agent_sigkill] [--stores sqlite,postgresql]
        [--method grid|pbt]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import destination, md_table
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.opening import open_store

POINTS = (0.05, 0.02, 0.01)  # the grid: optimizer.lr
EPOCHS = 12  # per trial: long enough that the fault lands mid-trial
COMMON = [
    "-m",
    "hydra/sweeper=wandb",
    "hydra.sweeper.metric={name: val/acc, goal: maximize}",
    "compile=off",
    "logger=none",
    "data.batch_size=16",
    f"trainer.max_epochs={EPOCHS}",
]
SWEEPS = {  # --method: the grid of POINTS, or a PBT population of as many members
    "grid": ["hydra.sweeper.method=grid", f"optimizer.lr=choice({','.join(map(str, POINTS))})"],
    "pbt": [
        "hydra.sweeper.method=pbt",
        f"hydra.sweeper.pbt.population={len(POINTS)}",
        "hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, "
        f"min: {min(POINTS)}, max: {max(POINTS)}}}}}",
    ],
}
SWEEP = [*COMMON, *SWEEPS["grid"]]
SLURM_JOBS = [
    "hydra/launcher=submitit_slurm",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=60",
]
SWEEP_TIMEOUT_S = 600.0


@dataclass
class Outcome:
    """What one fault left behind."""

    fault: str
    store: str
    method: str = "grid"
    exit_code: int | None = None
    finished_once: int = 0  # grid points (PBT: members) whose one run finished
    lost: int = 0  # grid points (members) with no finished run
    trained_twice: int = 0  # grid points (members) trained from scratch more than once
    # the run training when the fault came: "resumed" (from its last.pt), "not interrupted" (the
    # fault spared it: slurmctld restarted), or "NOT resumed"
    victim_ended: str = "NOT resumed"
    recover_s: float | None = None  # from the fault to the interrupted run training again
    wall_s: float = 0.0
    victim: dict = field(default_factory=dict)
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and self.finished_once == len(POINTS)
            and self.lost == 0
            and self.trained_twice == 0
            and self.victim_ended != "NOT resumed"
        )


def until(what: str, check: Callable[[], object], timeout: float = 300.0, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise TimeoutError(f"timed out waiting for {what}")


def slurm(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def job_fields(job: str) -> dict[str, str]:
    out = slurm("scontrol", "-o", "show", "job", job, check=False)
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def node_busy(node: str) -> bool:
    """Whether the node still finishes a job (a job started on it now would be killed)."""
    states = slurm("sinfo", "-h", "-n", node, "-o", "%t", check=False).split()
    return any("comp" in s or "drain" in s or "down" in s for s in states)


class RequeueStarter:
    """SLURM holds a requeued job for about two minutes (BeginTime); once its first instance
    has left the node, start it now, so that a fault costs seconds here, not minutes."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.seen: dict[str, float] = {}

    def poke(self, sweep_dir: Path) -> None:
        for pickle in sweep_dir.glob("agent-jobs/.submitit/*/*_submitted.pkl"):
            job = pickle.name[: -len("_submitted.pkl")]
            fields = job_fields(job)
            if fields.get("JobState") != "PENDING" or int(fields.get("Restarts", 0)) < 1:
                continue
            since = self.seen.setdefault(job, time.monotonic())
            if time.monotonic() - since > 3 and not node_busy(self.node):
                slurm("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)


def _cancel_left(out: Path) -> None:
    """Cancel the sweep's agent jobs still queued (a fault run that failed leaves none behind)."""
    for pickle in out.glob("sweeps/*/agent-jobs/.submitit/*/*_submitted.pkl"):
        slurm("scancel", pickle.name[: -len("_submitted.pkl")], check=False)


def agent_job(pid: int) -> str:
    """The SLURM job an agent process runs in (its environment, as root on this host): its array
    task (`123_1`), never the whole array (the first task's SLURM_JOB_ID is the array's id)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    found = dict(item.decode().split("=", 1) for item in environ if b"=" in item)
    if "SLURM_ARRAY_JOB_ID" in found:
        return f"{found['SLURM_ARRAY_JOB_ID']}_{found['SLURM_ARRAY_TASK_ID']}"
    return found["SLURM_JOB_ID"]


# The faults: each gets the running victim run (agent PID, trial PID) and the SLURM node.
def requeue(victim, node: str) -> None:
    slurm("scontrol", "requeue", agent_job(victim.agent_pid))


def scancel_kill(victim, node: str) -> None:
    slurm("scancel", "--signal=KILL", agent_job(victim.agent_pid))


def node_down(victim, node: str) -> None:
    """The node DOWN (its jobs killed, and requeued as a node failure), then back: RESUME, or
    by itself where the cluster returns a node to service when its slurmd registers again."""
    slurm("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=fault-injection")
    time.sleep(5)
    slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    until("the node back", lambda: not node_busy(node), timeout=120)


def slurmctld_restart(victim, node: str) -> None:
    pid = int(Path("/run/slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    until("slurmctld to stop", lambda: not Path(f"/proc/{pid}").exists(), timeout=60)
    time.sleep(3)
    subprocess.run(["slurmctld"], check=True, timeout=60)
    until("slurmctld to answer", lambda: slurm("sinfo", "-h", check=False).strip(), timeout=60)


def time_limit(victim, node: str) -> None:
    """The job's time limit cut to one minute once it has run a minute: SLURM ends it at its
    next check (up to 30 s later), mid-trial, with SIGTERM; the sweep runs with
    signal_delay_s=0, so no warning comes before."""
    job = agent_job(victim.agent_pid)
    until("the job's 60th second", lambda: _elapsed_s(job) >= 60, timeout=180, every=1)
    slurm("scontrol", "update", f"JobId={job}", "TimeLimit=1")


def _elapsed_s(job: str) -> float:
    """How long the job has run (squeue's %M: [D-]HH:MM:SS or MM:SS)."""
    text = slurm("squeue", "-h", "-j", job, "-o", "%M", check=False).strip() or "0:00"
    days, _, clock = text.rpartition("-")
    seconds = 0.0
    for part in clock.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds + 86400 * float(days or 0)


def agent_sigkill(victim, node: str) -> None:
    os.kill(victim.agent_pid, signal.SIGKILL)  # the agent first: it records nothing
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim.pid, signal.SIGKILL)


FAULTS: dict[str, Callable] = {
    "requeue": requeue,
    "scancel_kill": scancel_kill,
    "node_down": node_down,
    "slurmctld_restart": slurmctld_restart,
    "time_limit": time_limit,
    "agent_sigkill": agent_sigkill,
}
LOCAL = ("agent_sigkill",)  # faults without SLURM


def sweep_argv(
    fault: str, storage: str | None, partition: str | None, agents: int = 2, method: str = "grid"
) -> list[str]:
    argv = [sys.executable, "-m", "trainer", *COMMON, *SWEEPS[method]]
    argv.append(f"hydra.sweeper.agents={agents}")
    if fault not in LOCAL:
        argv += [*SLURM_JOBS, f"hydra.launcher.partition={partition}"]
    if fault == "time_limit":
        # trials of a few minutes: the victim still trains when SLURM's limit check comes
        argv += ["hydra.launcher.signal_delay_s=0", f"trainer.max_epochs={EPOCHS * 16}"]
    if storage is not None:
        argv.append(f"hydra.sweeper.storage='{storage}'")  # Hydra's quotes: the URL has '='
    return argv


def _store(out: Path) -> SweepStore | None:
    """The sweep's store (SQLite or PostgreSQL, as its directory records), once it exists."""
    found = [p.parent for p in out.glob("sweeps/*/sweep.yaml")]
    if not found:
        return None
    try:
        return open_store(found[0])
    except Exception:  # noqa: BLE001  (still being created: look again)
        return None


def _victim(out: Path, epochs: int = 2):
    """A run with `epochs` epochs done whose trial runs, once there is one."""
    store = _store(out)
    if store is None:
        return None
    running = [
        r
        for r in store.runs()
        if r.state == "running" and len(r.history) >= epochs and r.pid is not None
    ]
    store.close()
    return running[0] if running else None


def _scratch_starts(run) -> int:
    """How often the run's trial started from scratch: each start (the agent writes its command
    line first in the run's log) that did not resume from a checkpoint."""
    log = Path(run.log_path).read_text() if run.log_path else ""
    starts = sum(line.startswith(f"{sys.executable} -m trainer") for line in log.splitlines())
    return max(0, starts - log.count("resumed from"))


def judge(outcome: Outcome, out: Path, victim, fault_at: float) -> None:
    """Fill `outcome` from the sweep's store and its runs' logs."""
    sweep_dir = next(out.glob("sweeps/*/sweep.yaml")).parent
    store = open_store(sweep_dir)
    runs = [r for r in store.runs() if not r.superseded]
    store.close()
    pbt = outcome.method == "pbt"  # a PBT member is its run: its values change as it goes
    by_point: dict[float | str, list] = {}
    for r in runs:
        by_point.setdefault(r.id if pbt else r.params["optimizer.lr"], []).append(r)
    whole = _whole_lineages(sweep_dir) if pbt else set(POINTS)
    for point in by_point if pbt else POINTS:
        tries = by_point.get(point, [])
        finished = [r for r in tries if r.state == "finished"]
        outcome.finished_once += len(finished) == 1 and len(tries) == 1 and point in whole
        outcome.lost += not finished
        outcome.trained_twice += sum(_scratch_starts(r) for r in tries) > 1
    (after,) = [r for r in runs if r.id == victim.id] or [None]
    if after is not None:
        log = Path(after.log_path).read_text()
        interrupted = after.preemptions + after.losses > 0
        if after.state == "finished" and not interrupted:
            outcome.victim_ended = "not interrupted"
        elif after.state == "finished" and "resumed from" in log:
            outcome.victim_ended = "resumed"
        outcome.victim = {
            "id": after.id,
            "state": after.state,
            "epochs": len(after.history),
            "preemptions": after.preemptions,
            "losses": after.losses,
        }
        if after.started_at is not None and after.started_at > fault_at:
            outcome.recover_s = round(after.started_at - fault_at, 1)


def _whole_lineages(sweep_dir: Path) -> set[str]:
    """The PBT members whose lineage in results.json has an entry for every epoch they trained."""
    path = sweep_dir / "results.json"
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    return {
        r["id"]
        for r in runs
        if [s["epoch"] for s in r.get("lineage") or []] == list(range(r["epochs"]))
    }


def run_fault(
    fault: str, workdir: Path, storage: str | None = None, partition: str | None = None,
    node: str | None = None, agents: int = 2, method: str = "grid",
) -> Outcome:  # fmt: skip
    """Run the sweep (`agents` agents), inject `fault` mid-trial, wait for the sweep command;
    what it left."""
    outcome = Outcome(fault, "postgresql" if storage else "sqlite", method)
    out = workdir / "outputs"
    started = time.monotonic()
    proc = subprocess.Popen(
        sweep_argv(fault, storage, partition, agents, method),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = _reader(proc, lines)
    starter = RequeueStarter(node) if node else None
    try:
        try:
            victim = until("a trial mid-way", lambda: _victim(out), timeout=300)
        except TimeoutError:  # the sweep never got there: its output says why
            proc.kill()
            reader.join(timeout=10)
            outcome.output_tail = "".join(lines)[-6000:]
            return outcome
        fault_at = time.time()
        FAULTS[fault](victim, node)
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if starter is not None:
                starter.poke(next(out.glob("sweeps/*/sweep.yaml")).parent)
            time.sleep(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=10)
        _cancel_left(out)
    outcome.exit_code = proc.returncode
    outcome.wall_s = round(time.monotonic() - started, 1)
    outcome.output_tail = "".join(lines)[-6000:]
    judge(outcome, out, victim, fault_at)
    return outcome


def _reader(proc: subprocess.Popen, lines: list[str]):
    import threading

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def stores(names: list[str]) -> Iterator[list[tuple[str, str | None]]]:
    """(name, storage URL) per store asked for: SQLite is the sweep.db (no URL); PostgreSQL a
    pgserver started for the run."""
    if "postgresql" not in names:
        yield [("sqlite", None)]
        return
    from benchmarks.sweep_store import postgres

    with postgres(None) as (url, _version):
        yield [(name, url if name == "postgresql" else None) for name in names]


def markdown(rows: list[Outcome], meta: dict) -> str:
    pbt = any(r.method == "pbt" for r in rows)
    what = "members" if pbt else "points"
    head = ["fault", "store", f"{what} finished once", "lost", "trained twice", "exit",
            "run hit mid-trial", "recover (s)", "wall (s)"]  # fmt: skip
    table = [
        dict(zip(head, [
            r.fault, r.store, f"{r.finished_once}/{len(POINTS)}", r.lost, r.trained_twice,
            r.exit_code, r.victim_ended,
            "-" if r.recover_s is None else f"{r.recover_s:g}", f"{r.wall_s:g}",
        ], strict=True))
        for r in rows
    ]  # fmt: skip
    ok = all(r.ok for r in rows)
    command = "python -m benchmarks.sweep_faults" + (" --method pbt" if pbt else "")
    return "\n".join(
        [
            "# Sweep faults" + (" (PBT)" if pbt else ""),
            "",
            f"{meta['machine']}; {meta['sweep']}. `{command} --publish`.",
            "",
            "A fault lands mid-trial (the victim run has logged epochs); *recover* is the time "
            "from the fault to the victim run training again (resumed from its last.pt), the "
            "requeued job's start hastened with `scontrol update StartTime=now` once its first "
            "instance has left the node (SLURM would hold it about two minutes).",
            "",
            *md_table.table(table, head),
            "",
            *(["A member finished once has a lineage entry for every epoch.", ""] if pbt else []),
            f"Every fault left every {what[:-1]} finished exactly once, exit 0."
            if ok
            else f"NOT every fault left every {what[:-1]} finished exactly once with exit 0.",
            "",
        ]
    )


def _with_earlier(path: Path, rows: list[Outcome]) -> list[Outcome]:
    """`rows` and, from the table already in `path`, the rows of faults and stores not run now
    (`--faults requeue` refreshes one row of the published table), in the table's order."""
    earlier = json.loads(path.read_text())["rows"] if path.is_file() else []
    fresh = {(r.fault, r.store) for r in rows}
    kept = [Outcome(**row) for row in earlier if (row["fault"], row["store"]) not in fresh]
    order = {name: i for i, name in enumerate(FAULTS)}
    return sorted([*kept, *rows], key=lambda r: (order.get(r.fault, 99), r.store != "sqlite"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_faults", description=__doc__)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--method", choices=sorted(SWEEPS), default="grid")
    destination.add_arguments(parser)
    args = parser.parse_args(argv)
    from benchmarks.sweep_cluster import slurm_partition

    partition = slurm_partition()
    node = slurm("sinfo", "-h", "-N", "-o", "%N", check=False).split()[:1] if partition else []
    rows: list[Outcome] = []
    with stores(args.stores.split(",")) as chosen:
        for fault in args.faults.split(","):
            if fault not in LOCAL and partition is None:
                print(f"{fault}: skipped, no SLURM cluster (start one with `bash .ci/slurm`)")
                continue
            for name, url in chosen:
                with tempfile.TemporaryDirectory(prefix=f"fault-{fault}-") as work:
                    row = run_fault(
                        fault, Path(work), url, partition, node[0] if node else None,
                        method=args.method,
                    )  # fmt: skip
                rows.append(row)
                print(f"{fault} on {name}: {'ok' if row.ok else 'FAILED'} {asdict(row)['victim']}")
                if not row.ok:
                    print(row.output_tail[-3000:])
    sweep = (
        f"PBT population of {len(POINTS)} members"
        if args.method == "pbt"
        else f"grid of {len(POINTS)} points"
    )
    meta = {
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "sweep": f"{sweep}, 2 agents, {EPOCHS} epochs of small_cnn/digits",
    }
    folder = destination.folder(args)
    name = "sweep_faults" + ("_pbt" if args.method == "pbt" else "")
    rows = _with_earlier(folder / f"{name}.json", rows)
    (folder / f"{name}.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2)
    )
    (folder / f"{name}.md").write_text(markdown(rows, meta))
    print((folder / f"{name}.md").read_text())
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
