"""The dashboard's --control without a browser: a read-only server has no write path (POST 405,
its stores refuse writes); with --control every action needs the token in its header (403
without it or with another), GET never acts, a verb that does not apply is 409 with its reason,
no answer has a CORS header, and the token is in no log and no file."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tests.sweep.report.test_dashboard import RUNS, _digests, _sweep
from trainer.sweep.__main__ import _parser
from trainer.sweep.report.dashboard.catalog import Catalog, SweepPage
from trainer.sweep.report.dashboard.control import TOKEN_HEADER, Control
from trainer.sweep.report.dashboard.serving import _server
from trainer.sweep.store.database import SweepStore

STEER = "/api/sweeps/s1/steer"


def _ask(url: str, method: str = "GET", body=None, headers=None) -> tuple[int, dict, dict]:
    """(status, headers, JSON body or {"text": ...}) of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, head, raw = answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as err:
        status, head, raw = err.code, dict(err.headers), err.read()
    try:
        return status, head, json.loads(raw)
    except ValueError:
        return status, head, {"text": raw.decode()}


@pytest.fixture
def serving(tmp_path):
    """Start a dashboard of sweeps s1 (a running run, e) and s2 (one finished run) under
    tmp_path: `serving(control)` gives its base URL."""
    _sweep(tmp_path / "sweeps" / "s1")
    _sweep(tmp_path / "sweeps" / "s2", runs=RUNS[:1])
    servers = []

    def start(control: Control | None, only: str | None = None) -> str:
        server = _server(Catalog(tmp_path, None, only), "127.0.0.1", 0, control)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
        server.RequestHandlerClass.catalog.close()


def _store(tmp_path: Path, sweep: str = "s1") -> SweepStore:
    return SweepStore(tmp_path / "sweeps" / sweep / "sweep.db")


def test_without_control_no_write_path_is_reachable(tmp_path, serving):
    before = _digests(tmp_path)
    base = serving(None)
    handler = _ask(base + "/api/sweeps/s1")  # the page's poll works as ever
    assert handler[0] == 200 and handler[2]["sweep"]["verbs"] == ["pause", "stop", "cancel"]
    for method in ("POST", "PUT", "DELETE"):
        status, head, body = _ask(base + STEER, method, {"verb": "pause"}, {TOKEN_HEADER: "x"})
        assert status == 405 and head["Allow"] == "GET" and "--control" in body["text"]
    assert _ask(base + "/api/control")[0] == 404
    assert _ask(base + "/sweeps/s1/steer?verb=pause")[0] == 200  # the page: GET never acts
    page: SweepPage = Catalog(tmp_path, None, "s1").page("s1")
    assert not hasattr(page, "control") and page.directory == tmp_path / "sweeps" / "s1"
    with pytest.raises(OperationalError, match="readonly"):  # its store cannot write
        page.store.set("state", "paused")
    page.store.close()
    assert _digests(tmp_path) == before


def test_every_action_needs_the_token_in_its_header(tmp_path, serving):
    control = Control(None)
    base = serving(control)
    head = {TOKEN_HEADER: control.token}
    assert len(control.token) >= 40 and "(dashboard)" in control.by
    for headers in ({}, {TOKEN_HEADER: "wrong"}, {TOKEN_HEADER: control.token[:-1]}):
        status, _, body = _ask(base + STEER, "POST", {"verb": "pause"}, headers)
        assert status == 403 and TOKEN_HEADER in body["error"]
        assert _ask(base + "/api/control", headers=headers)[0] == 403
    # the token in the URL's query is not the header: refused too
    assert _ask(f"{base}{STEER}?token={control.token}", "POST", {"verb": "pause"})[0] == 403
    assert _ask(f"{base}/api/sweeps/s1/steer?token={control.token}&verb=pause")[0] == 404
    assert _store(tmp_path).lifecycle()[0] == "running"  # nothing acted

    assert _ask(base + "/api/control", headers=head)[2] == {"control": True, "by": control.by}
    status, _, body = _ask(base + STEER, "POST", {"verb": "pause"}, head)
    assert status == 200 and body["message"].startswith("sweep s1: paused by ")
    state, change = _store(tmp_path).lifecycle()
    assert state == "paused" and change.by == control.by and change.verb == "pause"
    assert _ask(base + "/api/sweeps/s1")[2]["sweep"]["verbs"] == ["resume", "stop", "cancel"]


def test_a_refused_action_is_409_with_its_reason_and_changes_nothing(tmp_path, serving):
    control = Control(None)
    base, head = serving(control), {TOKEN_HEADER: control.token}
    before = _digests(tmp_path)
    status, _, body = _ask(base + STEER, "POST", {"verb": "resume"}, head)
    assert status == 409 and "not paused" in body["error"] and "pause s1" in body["error"]
    status, _, body = _ask(base + STEER, "POST", {"stop": ["a"]}, head)  # finished
    assert status == 409 and "a (finished) already ended" in body["error"]
    status, _, body = _ask(base + STEER, "POST", {"stop": ["ee"]}, head)
    assert status == 409 and "did you mean e?" in body["error"]
    for bad in ({"verb": "delete"}, {"stop": []}, {"verb": "stop", "stop": ["e"]}, [1]):
        status, _, body = _ask(base + STEER, "POST", bad, head)
        assert status == 400 and "the body must be JSON" in body["error"]
    assert _ask(base + "/api/sweeps/nope/steer", "POST", {"verb": "pause"}, head)[0] == 404
    assert _ask(base + "/api/steer", "POST", {"verb": "pause"}, head)[0] == 404
    assert _digests(tmp_path) == before


def test_stop_a_run_and_stop_a_sweep_nobody_runs_writes_its_results(tmp_path, serving):
    control = Control(None)
    base, head = serving(control), {TOKEN_HEADER: control.token}
    status, _, body = _ask(base + STEER, "POST", {"stop": ["e"]}, head)
    assert status == 200 and "run e: asked to stop" in body["message"]
    assert _store(tmp_path).run("e").stop_requested  # its agent sends SIGTERM at its poll
    assert _store(tmp_path).lifecycle()[0] == "running"  # the sweep goes on
    results = tmp_path / "sweeps" / "s2" / "results.json"
    assert not results.exists()
    status, _, body = _ask(base + "/api/sweeps/s2/steer", "POST", {"verb": "stop"}, head)
    assert status == 200 and "stopped by" in body["message"]
    assert json.loads(results.read_text())["state_changed"]["by"] == control.by


def test_no_cors_header_and_the_token_in_no_log_and_no_file(tmp_path, serving, capsys, monkeypatch):
    control = Control(None)
    base = serving(control, only="s1")
    head = {TOKEN_HEADER: control.token, "Origin": "http://evil.example"}
    answers = [
        _ask(f"{base}/?token={control.token}", headers=head),  # redirected, token kept
        _ask(base + "/api/control", headers=head),
        _ask(base + STEER, "POST", {"verb": "pause"}, head),
        _ask(base + STEER, "POST", {"verb": "pause"}, {"Origin": "http://evil.example"}),
        _ask(base + STEER, "OPTIONS", None, head),  # a CORS preflight: not answered
    ]
    assert [a[0] for a in answers] == [200, 200, 200, 403, 501]
    for _, headers, _ in answers:
        assert not any(k.lower().startswith("access-control-") for k in headers), headers

    def broken(self):
        raise RuntimeError("the store is away")

    monkeypatch.setattr(SweepPage, "json", broken)  # a poll that fails: its path is printed
    status, _, body = _ask(f"{base}/api/sweeps/s1?token={control.token}")
    assert status == 500 and "the store is away" in body["error"]
    out, err = capsys.readouterr()
    assert "dashboard: /api/sweeps/s1: RuntimeError: the store is away" in err
    assert control.token not in out + err
    assert not any(control.token.encode() in p.read_bytes() for p in tmp_path.rglob("*.*"))


def test_the_command_takes_control_and_is_read_only_without_it():
    args = _parser().parse_args(["dashboard", "s1", "--control", "--port", "0"])
    assert args.control is True and args.sweep == "s1"
    assert _parser().parse_args(["dashboard", "s1"]).control is False
