"""The trial template: a trial forked from it is the process `subprocess.Popen` would have
started (argv, environment, session, signals, exit code, log), is isolated from the template and
the next trial, and the agent falls back to plain processes, saying so once, when it cannot be
used. Real processes throughout; tests/sweep/agents/template_probe.py stands in for `python -m trainer`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.sweep.agents.trial_start import ENV_SWITCH, TrialStarter, TrialTemplate

ROOT = Path(__file__).resolve().parents[3]
PROBE = "tests.sweep.agents.template_probe"
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the template forks (Linux)"),
    pytest.mark.pyversion,  # CPython's fork and signal dispositions, version by version
]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One template for the module (its imports take seconds), started from the repository
    root so that the probe module is importable, as a trial's `-m trainer` is."""
    previous = os.getcwd()
    os.chdir(ROOT)
    # Without what the template's imports set (this test process has imported them already).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KMP_", "TORCHINDUCTOR_"))}
    env["PROBE_COMMON"] = "1"
    log = tmp_path_factory.mktemp("template") / "template.log"
    tpl = TrialTemplate(env, (), log, modules=("trainer", PROBE))
    try:
        assert tpl.wait_ready(), tpl.problem
        yield tpl
    finally:
        tpl.close()
        os.chdir(previous)


def _run(template, tmp_path, name, action="exit0", env_extra=None, timeout=60.0):
    out, log_path = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
    env = {**template.env, **(env_extra or {})}
    argv = [sys.executable, "-m", PROBE, str(out), action]
    with open(log_path, "w") as log:
        trial = template.start(argv, env, log, ())
    deadline = time.monotonic() + timeout
    while trial.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return trial, out, log_path


def _plain(template, tmp_path, name, env_extra=None):
    """The same probe started the way the agent starts a plain process."""
    out, log_path = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
    env = {**template.env, **(env_extra or {})}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", PROBE, str(out), "exit0"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
    assert proc.wait(timeout=60) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_a_forked_trial_sees_what_a_new_process_sees(template, tmp_path):
    per_trial = {"WANDB_RUN_ID": "abc123", "WANDB_SWEEP_ID": "s1"}
    trial, out, log = _run(template, tmp_path, "forked", env_extra=per_trial)
    assert trial.returncode == 0
    forked = json.loads(out.read_text())
    plain = _plain(template, tmp_path, "plain", env_extra=per_trial)
    forked["argv"][1] = plain["argv"][1] = "OUT"  # each wrote its own file
    # What the template's imports set (KMP_*, Inductor's cache dir) a trial gets as defaults,
    # as a new `python -m trainer` process would from the same imports.
    assert template.set_by_imports and set(template.set_by_imports) <= set(forked["env"])
    plain["env"] = {**template.set_by_imports, **plain["env"]}
    signals = ("sigint", "sigterm", "sighup", "sigusr2")
    for key in ("argv", "path", "env", "cwd", "affinity", *signals, "main", "exit_finalizers"):
        assert forked[key] == plain[key], key
    assert forked["pid"] == trial.pid != template.process.pid
    assert forked["sid"] == forked["pid"]  # its own session, as start_new_session gives
    assert f"probe {trial.pid} exit0" in log.read_text()  # stdout and stderr go to its log


@pytest.mark.slow
def test_signals_ignored_by_the_agent_stay_ignored_in_a_forked_trial(tmp_path):
    """Started from a shell that ignores SIGINT and SIGHUP (nohup, `&` in a script, a batch
    system), a new trial process inherits them ignored: so does a trial forked from the
    template; and with them handled, both get Python's defaults (the test above)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KMP_", "TORCHINDUCTOR_"))}
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGHUP)}
    previous = os.getcwd()
    os.chdir(ROOT)
    tpl = TrialTemplate(env, (), tmp_path / "template.log", modules=("trainer", PROBE))
    try:
        assert tpl.wait_ready(), tpl.problem
        trial, out, _ = _run(tpl, tmp_path, "forked")
        assert trial.returncode == 0
        forked, plain = json.loads(out.read_text()), _plain(tpl, tmp_path, "plain")
    finally:
        tpl.close()
        os.chdir(previous)
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert forked["sigint"] == plain["sigint"] == repr(signal.SIG_IGN)
    assert forked["sighup"] == plain["sighup"] == repr(signal.SIG_IGN)
    assert forked["sigterm"] == plain["sigterm"]


@pytest.mark.slow
def test_a_second_trial_sees_the_same_environment_as_the_first(template, tmp_path):
    _, first, _ = _run(template, tmp_path, "one", env_extra={"WANDB_RUN_ID": "run1"})
    _, second, _ = _run(template, tmp_path, "two", env_extra={"WANDB_RUN_ID": "run2"})
    one, two = json.loads(first.read_text()), json.loads(second.read_text())
    assert one["env"].pop("WANDB_RUN_ID") == "run1" and two["env"].pop("WANDB_RUN_ID") == "run2"
    assert one["env"] == two["env"] and one["argv"][2:] == two["argv"][2:]
    assert one["pid"] != two["pid"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "action, code, said",
    [
        ("exit3", 3, ""),
        ("raise", 1, "RuntimeError: the probe failed on purpose"),
        ("memory", 1, "MemoryError"),
    ],
)
def test_exit_codes_are_the_trials_and_a_failure_leaves_the_template_whole(
    template, tmp_path, action, code, said
):
    trial, _, log = _run(template, tmp_path, action, action)
    assert trial.returncode == code
    assert said in log.read_text()
    after, out, _ = _run(template, tmp_path, f"after-{action}")
    assert after.returncode == 0 and out.is_file()
    assert template.process.poll() is None


def _until(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


@pytest.mark.slow
def test_signals_reach_the_trial_and_sigkill_is_reported(template, tmp_path):
    out, log_path = tmp_path / "wait.json", tmp_path / "wait.log"
    argv = [sys.executable, "-m", PROBE, str(out), "wait"]
    saved = []
    for signum in (signal.SIGTERM, signal.SIGUSR2, signal.SIGKILL):
        with open(log_path, "w") as log:
            trial = template.start(argv, dict(template.env), log, ())
        assert _until(lambda: f"probe {trial.pid} wait" in log_path.read_text())  # noqa: B023
        if signum == signal.SIGUSR2:  # SLURM's warning goes to every process of the job
            os.kill(template.process.pid, signum)
        trial.send_signal(signum)
        assert _until(lambda: trial.poll() is not None)  # noqa: B023
        assert trial.returncode == (-9 if signum == signal.SIGKILL else 128 + signum)
        saved.append("received, saving" in log_path.read_text())
    assert saved == [True, True, False]
    assert template.process.poll() is None  # the template outlives them all


@pytest.mark.slow
def test_the_trial_starter_falls_back_to_processes_once_with_the_reason(tmp_path, capsys):
    env = dict(os.environ)
    starter = TrialStarter(env, (), tmp_path / "template.log", modules=(PROBE,))
    try:
        assert starter.template is not None and starter.template.wait_ready()
        starter.template.process.kill()  # the template dies: trials start as processes
        starter.template.process.wait()
        for name in ("a", "b"):
            out = tmp_path / f"{name}.json"
            with open(tmp_path / f"{name}.log", "w") as log:
                trial = starter.start([sys.executable, "-m", PROBE, str(out)], {**env}, log, ())
            assert isinstance(trial, subprocess.Popen) and trial.wait(timeout=60) == 0
    finally:
        starter.close()
    said = capsys.readouterr().out
    assert said.count("trials start as new processes") == 1
    assert "(the trial template ended (exit code -9))" in said


@pytest.mark.slow
def test_only_python_m_trainer_on_this_interpreter_and_environment_is_forked(template):
    env = dict(template.env)
    trainer = [sys.executable, "-m", "trainer", "compile=off"]
    assert template.usable_for(["/usr/bin/env", *trainer], env) == ""
    assert template.usable_for(["/usr/bin/env", *trainer], {**env, "WANDB_RUN_ID": "x"}) == ""
    assert "not `python -m trainer`" in template.usable_for(["torchrun", "-m", "trainer"], env)
    assert "not `python -m trainer`" in template.usable_for(["python3.9", "-m", "trainer"], env)
    assert "OMP_NUM_THREADS" in template.usable_for(trainer, {**env, "OMP_NUM_THREADS": "7"})
    # the defaults scikit-learn's import sets in the agent too do not keep a trial from forking
    assert template.usable_for(trainer, {**env, **template.set_by_imports}) == ""
    assert "KMP_INIT_AT_FORK" in template.usable_for(trainer, {**env, "KMP_INIT_AT_FORK": "x"})


@pytest.mark.slow
def test_a_torchrun_sweep_starts_no_template(tmp_path, capsys):
    from trainer.sweep.definition.command import trial_command

    starter = TrialStarter(
        dict(os.environ), (), tmp_path / "t.log", command=trial_command([], [], 2)
    )
    assert starter.template is None
    assert "not `python -m trainer`" in capsys.readouterr().out
    plain = TrialStarter(dict(os.environ), (), tmp_path / "t.log", command=trial_command([]))
    assert plain.template is not None
    plain.close()


@pytest.mark.slow
def test_a_sweep_that_never_compiles_or_logs_skips_those_imports():
    from trainer.sweep.agents.forkable import template_flags
    from trainer.sweep.agents.template import _preimports
    from trainer.sweep.definition.command import trial_command

    assert template_flags(trial_command(["model=small_cnn"])) == template_flags(None) == []
    flags = template_flags(trial_command(["compile=off", "logger=none"]))
    assert flags == ["--no-compiler", "--no-wandb"]
    assert "wandb" not in _preimports(flags) and "torch._inductor.compile_fx" not in _preimports(
        flags
    )
    assert {"wandb", "torch._inductor.compile_fx", "trainer.run"} <= set(_preimports([]))


def test_the_switch_turns_the_template_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_SWITCH, "0")
    starter = TrialStarter(dict(os.environ), (), tmp_path / "template.log")
    assert starter.template is None
    assert f"{ENV_SWITCH}=0" in capsys.readouterr().out


def test_a_trial_stopped_by_a_clusters_warning_is_preempted_not_crashed():
    from trainer.sweep.agents.local_agent import _final_state

    assert _final_state(128 + signal.SIGTERM, False, True, preempted=True) == "preempted"
    assert _final_state(0, False, True, preempted=True) == "finished"
    assert _final_state(128 + signal.SIGTERM, False, True) == "crashed"


def test_a_trials_end_wakes_the_template_at_once():
    """The template waits on each trial's pidfd, not a poll interval: the descriptor is readable
    as soon as the child has ended."""
    import select

    from trainer.sweep.agents.template import _exit_watch

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    watch = _exit_watch(pid)
    try:
        if watch is None:
            pytest.skip("no pidfd on this kernel: the template polls every REAP_S")
        readable, _, _ = select.select([watch], [], [], 30)
        assert readable == [watch]
        assert os.waitpid(pid, os.WNOHANG)[0] == pid
    finally:
        if watch is not None:
            os.close(watch)


@pytest.mark.slow
def test_waiting_for_the_template_ends_when_told(tmp_path):
    """The agent waits for its template before its first claim; a signal ends that wait."""
    starter = TrialStarter(dict(os.environ), (), tmp_path / "template.log", modules=(PROBE,))
    try:
        started = time.monotonic()
        starter.wait_ready(stop=lambda: True)
        assert time.monotonic() - started < 5 and starter.template.ready is None
        starter.wait_ready(stop=lambda: False)
        assert starter.template.ready
    finally:
        starter.close()


def _children(pid: int, besides: set[int] = frozenset()) -> set[int]:
    """The child processes of `pid` other than `besides`, once there is one (30 s at most)."""
    deadline, found = time.monotonic() + 30, set()
    while not found and time.monotonic() < deadline:
        found = set(map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split()))
        found -= besides
        time.sleep(0.02)
    return found


@pytest.mark.slow
def test_each_trial_is_forked_before_its_request_and_ends_with_its_template(tmp_path):
    """The template keeps one trial forked ahead (the fork is off the hand-out's path): the
    trial an agent starts is that process, the next is forked at once, and a spare that never
    got a request ends when its template does. A spare that died is replaced by a fork."""
    starter = TrialStarter(dict(os.environ), (), tmp_path / "template.log", modules=(PROBE,))
    tpl = starter.template
    try:
        assert tpl.wait_ready(), tpl.problem
        spares = _children(tpl.process.pid)
        assert len(spares) == 1
        trial, out, _ = _run(tpl, tmp_path, "first")
        assert trial.pid in spares and trial.poll() == 0 and out.exists()
        (gone,) = _children(tpl.process.pid, besides=spares)
        os.kill(gone, signal.SIGKILL)  # a spare killed before its request: the template forks
        deadline = time.monotonic() + 30
        while _state(gone) != "Z" and time.monotonic() < deadline:  # its socket closed
            time.sleep(0.02)
        trial, out, _ = _run(tpl, tmp_path, "second")
        assert trial.pid != gone and trial.poll() == 0 and out.exists()
        (spare,) = _children(tpl.process.pid, besides={*spares, gone, trial.pid})
    finally:
        starter.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{spare}").exists():
        time.sleep(0.02)
    assert not Path(f"/proc/{spare}").exists() or "Z" in _state(spare)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _told_pair():
    """A trial's socket to its template, watched as the template watches a handed-out trial's,
    and the agent's socket pair."""
    import socket

    from trainer.sweep.agents.template import Told

    agent, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    told = Told()
    told.watch(4242, mine)
    return told, mine, theirs, agent, agent_end


def test_a_trial_tells_its_exit_and_the_template_reports_it_once():
    """A trial tells its exit code before the kernel tears its process down; the template
    reports it to the agent at once, and not again when it reaps the process."""
    import select

    from trainer.sweep.agents.template import Request, receive, tell_exit

    told, mine, theirs, agent, agent_end = _told_pair()
    tell_exit(Request("trainer", [], {}, "/", [], -1, notify=theirs), 3)
    readable, _, _ = select.select([mine], [], [], 30)
    told.read(readable, agent)
    assert receive(agent_end) == ({"exited": 4242, "code": 3}, [])
    assert told.forget(4242) is True  # reaped: reported already
    assert told.forget(4242) is False and not told.sockets
    for sock in (theirs, agent, agent_end):
        sock.close()


def test_a_trial_that_used_cuda_is_reported_when_its_process_is_gone(monkeypatch):
    """A trial that initialized CUDA tells nothing ahead: its device memory is freed only with
    its process, so its end is the reap's to report."""
    import select

    import torch

    from trainer.sweep.agents.template import Request, receive_nowait, tell_exit

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    told, mine, theirs, agent, agent_end = _told_pair()
    tell_exit(Request("trainer", [], {}, "/", [], -1, notify=theirs), 0)
    theirs.close()  # the process ends
    readable, _, _ = select.select([mine], [], [], 30)
    told.read(readable, agent)
    with pytest.raises(BlockingIOError):
        receive_nowait(agent_end)
    assert told.forget(4242) is False  # the reap reports it
    agent.close()
    agent_end.close()
