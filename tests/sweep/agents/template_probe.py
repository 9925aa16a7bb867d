"""A stand-in trial for tests/sweep/agents/test_template.py: records what its process sees (argv,
environment, session, signal dispositions, ...) into a JSON file, then does what its second
argument asks: exit 0 or 3, raise, exhaust its memory, or wait for SIGTERM."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import weakref


def record(path: str) -> None:
    seen = {
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "argv": sys.argv,
        "path": sys.path,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "sigint": repr(signal.getsignal(signal.SIGINT)),
        "sigterm": repr(signal.getsignal(signal.SIGTERM)),
        "sighup": repr(signal.getsignal(signal.SIGHUP)),
        "sigusr2": repr(signal.getsignal(signal.SIGUSR2)),
        "main": __name__,
        "stdin_is_tty": sys.stdin.isatty() if sys.stdin else None,
        # finalizers its exit would run: a new process has none of the template's
        "exit_finalizers": sum(f.atexit for f in list(weakref.finalize._registry)),
    }
    with open(path, "w") as handle:
        json.dump(seen, handle)


def exhaust_memory() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as handle:
        used = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), hard))
    hog = []
    while True:
        hog.append(bytearray(16 << 20))


def _stop(signum, frame):
    print(f"probe: {signal.Signals(signum).name} received, saving", flush=True)
    sys.exit(128 + signum)


def main() -> None:
    record(sys.argv[1])
    action = sys.argv[2] if len(sys.argv) > 2 else "exit0"
    if action == "wait":  # as the trainer's loop: SIGTERM, and SLURM's warning signal
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGUSR2, _stop)
    print(f"probe {os.getpid()} {action}", flush=True)
    if action == "exit3":
        sys.exit(3)
    if action == "raise":
        raise RuntimeError("the probe failed on purpose")
    if action == "memory":
        exhaust_memory()
    while action == "wait":
        time.sleep(0.05)


if __name__ == "__main__":
    main()
