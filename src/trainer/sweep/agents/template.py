"""The trial template: a process that has imported what every trial imports (torch, torchvision,
Hydra, W&B, the project) and never touched CUDA. Each trial an agent asks for is a fork of it that
becomes `python -m trainer <args>`: its own PID, session, environment, log, signals and exit code.

    python -m trainer.sweep.agents.template FD [--no-compiler] [--no-wandb]   (from sweep.launch)
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What a trial imports before its first step, in import order; none of them touches CUDA or
# starts a thread that a fork would lose while it holds a lock (torch and OpenBLAS re-create
# their pools in a child). Inductor's compiler too, unless the sweep never compiles.
PREIMPORT = (
    "torch",
    "torchvision",
    "torchvision.transforms.v2",
    "hydra",
    "omegaconf",
    "trainer.run",
    "trainer.preflight",
    "trainer.trial.trial_argv",
    "trainer.trial.trial_params",
    "sklearn.datasets",
)
TRACKER = ("wandb",)  # unless no trial logs to W&B
COMPILER = ("torch._dynamo", "torch._inductor.compile_fx")  # unless no trial compiles
# How often ended trials are reaped and reported where a child's end cannot wake the template
# (no pidfd: Linux before 5.3); with one, a trial's end is reported at once.
REAP_S = 0.05
# The signals a trial gets as a new process would: their dispositions as the agent passed them
# on (ignored stays ignored across exec, as under nohup, `&` in scripts and batch systems; a
# handled one becomes Python's default), read when the template starts, before it changes any.
INHERITED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGCHLD,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
# Signals a batch system sends every process of a job (SLURM's warning before a time limit):
# the template outlives them, and the agent decides what its trials do about them.
TEMPLATE_IGNORES = (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
MAX_MESSAGE = 1 << 20  # bytes of one request (argv and environment as JSON)


@dataclass
class Request:
    """One trial to start: `python -m <module> *args` with this environment, cwd, log and
    cores (the agent asks only for `trainer`)."""

    module: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    cores: list[int]
    log_fd: int
    # the trial's end of its socket to the template, where it tells its exit code before its
    # process is torn down (`tell_exit`); None for a trial forked at its request
    notify: socket.socket | None = None


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message (a SOCK_SEQPACKET packet of JSON), with file descriptors when given."""
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the descriptors it carried; (None, []) once the peer is gone."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)


def receive_nowait(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """`receive`, raising BlockingIOError when no message is waiting."""
    sock.setblocking(False)
    try:
        return receive(sock)
    finally:
        sock.setblocking(True)


def _reap(children: dict[int, int | None], told: Told, sock: socket.socket) -> None:
    """Reap the trials that ended; report each one's exit code unless it told it already."""
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            fd = children.pop(pid)
            if fd is not None:
                os.close(fd)
            if not told.forget(pid):
                send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


class Told:
    """The trials' ends of their exits told ahead (`tell_exit`): each trial's socket to the
    template, and the trials that told theirs and are not reaped yet."""

    def __init__(self) -> None:
        self.sockets: dict[socket.socket, int] = {}  # a trial's socket -> its pid
        self.pids: set[int] = set()  # told their exit, not reaped yet

    def watch(self, pid: int, sock: socket.socket) -> None:
        self.sockets[sock] = pid

    def read(self, readable: list[Any], agent: socket.socket) -> None:
        """Forward to the agent the exit codes the trials with a `readable` socket told."""
        for sock in [s for s in readable if s in self.sockets]:
            pid = self.sockets.pop(sock)
            try:
                message, fds = receive(sock)
            except OSError:  # its end closed abnormally: its reap reports it
                message, fds = None, []
            sock.close()
            for fd in fds:
                os.close(fd)
            if message is not None and "exiting" in message:
                send(agent, {"exited": pid, "code": message["exiting"]})
                self.pids.add(pid)

    def forget(self, pid: int) -> bool:
        """The trial `pid` was reaped: whether it had told its exit (then reported already)."""
        for sock in [s for s, p in self.sockets.items() if p == pid]:
            del self.sockets[sock]
            sock.close()
        if pid in self.pids:
            self.pids.discard(pid)
            return True
        return False

    def close(self) -> None:
        """In a forked child: these sockets are the template's."""
        for sock in self.sockets:
            sock.close()


def _exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when child `pid` ends (a pidfd), so its end is
    reported without waiting for the next poll; None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python or Linux without pidfds: REAP_S polls
        return None


def serve(
    sock: socket.socket, warm: Callable[[list[str], str], None] | None = None
) -> Request | None:
    """Fork a trial for every request until the agent closes its end (None, in the template);
    in a forked child, return its request. Each trial is forked ahead of its request (a spare,
    `_fork_spare`), so that the fork is not on the hand-out's path. After handing out a
    `trainer` trial, the template calls `warm(args, cwd)` (`prepare`'s: the trials after it
    find its composition and data kept), then forks the next spare."""
    children: dict[int, int | None] = {}  # running trials: pid -> its pidfd (None: polled)
    told = Told()
    spare = _fork_spare(sock, children, told)
    if isinstance(spare, Request):
        return spare
    while True:
        watched = [fd for fd in children.values() if fd is not None]
        polled = len(watched) < len(children)
        readable, _, _ = select.select(
            [sock, *told.sockets, *watched], [], [], REAP_S if polled else None
        )
        told.read(readable, sock)  # before the reap: a trial that told is reported once
        _reap(children, told, sock)
        if sock not in readable:
            continue
        message, fds = receive(sock)
        if message is None:
            return None  # the agent ended (or died): running trials live on, as with Popen
        pid = _hand_to(spare, message, fds, told)
        if pid is None:  # the spare is gone (a signal to the template's group): fork now
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _close_watches(children, told)
                return _request(message, fds[0])
        for fd in fds:
            os.close(fd)
        children[pid] = _exit_watch(pid)
        send(sock, {"started": pid})
        if warm is not None and message["module"] == "trainer":  # for the trials after it
            warm(message["args"], message["cwd"])
        spare = _fork_spare(sock, children, told)
        if isinstance(spare, Request):
            return spare


def _request(message: dict[str, Any], log_fd: int, notify: socket.socket | None = None) -> Request:
    return Request(
        module=message["module"],
        args=message["args"],
        env=message["env"],
        cwd=message["cwd"],
        cores=message.get("cores") or [],
        log_fd=log_fd,
        notify=notify,
    )


def _close_watches(children: dict[int, int | None], told: Told) -> None:
    """In a forked child: the template's pidfds of its trials and their sockets are not the
    trial's."""
    for fd in children.values():
        if fd is not None:
            os.close(fd)
    told.close()


def _fork_spare(
    sock: socket.socket, children: dict[int, int | None], told: Told
) -> tuple[int, socket.socket] | Request:
    """Fork the next trial before its request: in the template, (its pid, the socket its
    request goes to); in the spare, once its request came, that request (with the socket, on
    which the trial tells its exit). Forking the template (about 0.8 GB of memory mapped)
    takes about 12 ms on two cores. A spare whose template ends, before any request, ends
    too."""
    sys.stdout.flush()
    sys.stderr.flush()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        _close_watches(children, told)
        sock.close()  # the agent's socket is the template's
        mine.close()
        message, fds = receive(theirs)
        if message is None:
            os._exit(0)
        return _request(message, fds[0], theirs)
    theirs.close()
    return pid, mine


def _hand_to(
    spare: tuple[int, socket.socket], message: dict[str, Any], fds: list[int], told: Told
) -> int | None:
    """Pass the request to the spare: its pid (its socket then watched for its exit, `told`);
    None when it is gone (it is reaped here)."""
    pid, mine = spare
    try:
        send(mine, message, fds)
    except OSError:  # it ended (killed with the template's process group, say)
        mine.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None
    told.watch(pid, mine)
    return pid


def tell_exit(request: Request, code: int) -> None:
    """In a trial about to end with `code`: tell the template, which reports it to the agent at
    once, not after the kernel has torn down the process (about 17 ms for a fork of the
    template here), so the next trial starts meanwhile. A trial that used CUDA does not: its
    end is reported once its process, and the device memory it held, are gone."""
    if request.notify is None:
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return
    with contextlib.suppress(OSError):  # the template is gone: the agent watches the PID
        send(request.notify, {"exiting": code})


def become_trial(
    request: Request,
    sock: socket.socket,
    set_by_imports: dict[str, str] | None = None,
    inherited: dict[int, Any] | None = None,
) -> None:
    """In the forked child: the process `subprocess.Popen(argv, env=..., stdout=log,
    stderr=STDOUT, start_new_session=True)` would have started, minus the imports (whose
    environment defaults `set_by_imports` it gets, as their import would set them), with the
    signal dispositions the template `inherited` (a new process inherits the same)."""
    sock.close()
    os.setsid()
    for signum in INHERITED_SIGNALS:
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, (inherited or {}).get(signum, default))
    os.dup2(request.log_fd, 1)
    os.dup2(request.log_fd, 2)
    os.close(request.log_fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    for key, value in (set_by_imports or {}).items():
        os.environ.setdefault(key, value)
    if request.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, request.cores)
    forget_template_finalizers()
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
        sys.modules["numpy"].random.seed()
    sys.argv = ["-m", *request.args]  # runpy puts the module's file first, as `-m` does


def forget_template_finalizers() -> None:
    """In a forked trial: the template's finalizers (201 of torch's operator libraries, from the
    imports) clean up objects of the template; a new process would have none to run at its exit,
    where they cost 40 ms. The trial's own still run. (`finalize` keeps them in `_registry`.)"""
    for finalizer in list(getattr(weakref.finalize, "_registry", ())):
        finalizer.atexit = False


def _preimports(flags: list[str]) -> list[str]:
    """PREIMPORT, then TRACKER and COMPILER unless the flags say no trial of the sweep needs them."""
    return [
        *PREIMPORT,
        *([] if "--no-wandb" in flags else TRACKER),
        *([] if "--no-compiler" in flags else COMPILER),
    ]


class PrepareError(Exception):
    """What the template could not import or prepare."""


def prepare(flags: list[str]) -> Callable[[list[str], str], None]:
    """What every trial would otherwise do at its start or end, done once in the template: the
    imports (`_preimports(flags)`), Hydra's plugin discovery, compositions and in-memory data
    sets kept for the trials (compose_cache, kept_data: the returned `warm(args, cwd)` keeps a
    trial's after the template forked it) and rich's first table. PrepareError names a step
    that failed."""
    name = "?"
    try:
        for name in _preimports(flags):
            importlib.import_module(name)
        name = "Hydra's plugins"  # discovered (each plugin imported) once for all trials
        importlib.import_module("hydra.core.plugins").Plugins.instance()
        name = "trainer.sweep.agents.compose_cache"  # imports Hydra: after PREIMPORT
        compose_cache = importlib.import_module(name)
        compose_cache.install()
        name = "trainer.sweep.agents.kept_data"  # the data set its trials train on
        kept_data = importlib.import_module(name)
        name = "trainer.outputs.console"  # the table each trial prints at its end
        importlib.import_module(name).warm_up()
    except Exception as err:
        raise PrepareError(f"importing {name} failed: {type(err).__name__}: {err}") from err

    def warm(args: list[str], cwd: str) -> None:
        cfg = compose_cache.warm(args, cwd)
        if cfg is not None:
            kept_data.keep(cfg)

    return warm


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(argv[0]))
    inherited = {signum: signal.getsignal(signum) for signum in INHERITED_SIGNALS}
    for signum in TEMPLATE_IGNORES:  # the agent decides when the template ends
        signal.signal(signum, signal.SIG_IGN)
    before = dict(os.environ)
    try:
        warm = prepare(argv)
    except PrepareError as err:  # reported to the agent, which then starts trials as processes
        send(sock, {"error": str(err)})
        return 1
    # Variables the imports set (scikit-learn's KMP_* defaults): a new process's imports would
    # set them again, a fork's do not, so each trial gets them as defaults.
    set_by_imports = {k: v for k, v in os.environ.items() if before.get(k) != v}
    # Every object so far lives as long as the template: a trial's garbage collections skip
    # them instead of touching (and so copying) every page the fork shares with the template.
    gc.collect()
    gc.freeze()
    send(sock, {"ready": os.getpid(), "python": sys.executable, "set_by_imports": set_by_imports})
    request = serve(sock, warm)
    if request is None:  # nothing to write or close: skip the teardown of a torch process
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    become_trial(request, sock, set_by_imports, inherited)
    code = run_as_main(request.module)
    tell_exit(request, code)
    os._exit(code)  # the trial's exit, without tearing down the template's modules


def _exit_code(exc: SystemExit) -> int:
    """The status Python exits with for this SystemExit (None: 0, an int, else 1 + message)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def run_as_main(module: str) -> int:
    """`python -m <module>` in this (forked) process, ended as Python ends a program: non-daemon
    threads joined, atexit handlers run, streams flushed. What Python would do next, tearing
    down every module, is skipped: in a fork it copies the template's memory page by page
    (about 2 s here) and changes nothing the trial wrote."""
    interrupted = False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        code, interrupted = 128 + signal.SIGINT, True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    # What Python's exit runs, in its order; neither step has a public name. The first calls
    # threading's exit hooks (thread pools' shutdown) and joins non-daemon threads.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: Python ignores it too
            stream.flush()
    if interrupted:  # Python ends on an uncaught KeyboardInterrupt by SIGINT itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


if __name__ == "__main__":
    sys.exit(main())
