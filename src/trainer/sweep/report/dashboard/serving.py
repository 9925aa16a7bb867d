"""The dashboard's HTTP side, on the standard library's ThreadingHTTPServer: the page, Plotly's
JavaScript bundle from the installed `plotly` package (no internet needed), and the JSON the
page polls (/api/sweeps, /api/sweeps/<id>). It only reads, unless started with --control: then
POST /api/sweeps/<id>/steer, carrying the token of the printed URL, steers the sweep."""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from trainer.errors import TrainerError
from trainer.sweep.report.dashboard.control import MAX_BODY, TOKEN_HEADER, Control
from trainer.sweep.store.steering import SteerError

if TYPE_CHECKING:
    from trainer.sweep.report.dashboard.catalog import Catalog

INSTALL = 'pip install -e ".[dashboard]"'
PORT = 8765  # the default port


def plotly_bundle() -> Path:
    """plotly.js as the `plotly` package ships it; TrainerError (exit 2) saying how to install
    the extra when it is missing."""
    try:
        import plotly  # optional: the [dashboard] extra (said below when missing)
    except ImportError:
        raise TrainerError(
            "python -m trainer.sweep dashboard draws its charts with Plotly, which is not "
            f"installed: install the dashboard extra in this environment ({INSTALL} in a "
            "checkout, or pip install 'compiled-trainer[dashboard]') and run it again."
        ) from None
    bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not bundle.is_file():
        raise TrainerError(f"{bundle} is missing: reinstall plotly ({INSTALL}).")
    return bundle


STEER = re.compile(r"^/api/sweeps/([^/]+)/steer$")  # --control's one action route


class Handler(BaseHTTPRequestHandler):
    """GET only: / and /sweeps/<id> (the page), /plotly.min.js, /api/sweeps[/<id>]; POST,
    PUT, PATCH and DELETE are refused (405): this handler has no way to write."""

    catalog: Catalog
    page: bytes
    bundle: Path
    server_version = "compiled-trainer-dashboard"

    def do_GET(self) -> None:
        url = urlparse(self.path)
        path = url.path
        if path == "/" and self.catalog.only is not None:
            self.send_response(HTTPStatus.FOUND)  # the query (--control's token) goes along
            query = f"?{url.query}" if url.query else ""
            self.send_header("Location", f"/sweeps/{self.catalog.only}{query}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/" or path.startswith("/sweeps/"):
            self._send(self.page, "text/html; charset=utf-8")
        elif path == "/plotly.min.js":
            self._send(self.bundle.read_bytes(), "text/javascript", cache=True)
        elif path == "/api/sweeps":
            self._json(lambda: json.dumps(self.catalog.listing()))
        elif path.startswith("/api/sweeps/"):
            sweep_id = unquote(path.removeprefix("/api/sweeps/"))
            self._json(lambda: self.catalog.page(sweep_id).json())
        else:
            self._send(b"not found", "text/plain", HTTPStatus.NOT_FOUND)

    def do_POST(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        body = b"a read-only dashboard: start it with --control to steer the sweep from the page"
        self.send_header("Allow", "GET")
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_DELETE = do_PATCH = do_POST

    def _json(self, body) -> None:
        """Answer with the JSON `body()` makes; 404 for a sweep not served, 500 with the reason
        for a store that cannot be read right now (the page shows it and polls again)."""
        try:
            text, status = body(), HTTPStatus.OK
        except KeyError as err:
            text, status = json.dumps({"error": f"no sweep {err} here"}), HTTPStatus.NOT_FOUND
        except Exception as err:  # noqa: BLE001 - any failure goes to the page, once logged
            where = urlparse(self.path).path  # never the query: --control's token may be there
            print(f"dashboard: {where}: {type(err).__name__}: {err}", file=sys.stderr)
            reason = f"{type(err).__name__}: {err}"
            text, status = json.dumps({"error": reason}), HTTPStatus.INTERNAL_SERVER_ERROR
        self._send(text.encode(), "application/json", status)

    def _send(self, body: bytes, kind: str, status=HTTPStatus.OK, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=86400" if cache else "no-store")
        self.send_header("Referrer-Policy", "no-referrer")  # the page's URL may hold the token
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        """Quiet: the page polls every two seconds, and an access log would print the URL with
        --control's token; failures are printed by _json, without the query."""


class ControlHandler(Handler):
    """Handler, and with the token of `control` (header X-Trainer-Token, 403 without it):
    GET /api/control (whether the page's token is good) and POST /api/sweeps/<id>/steer with
    JSON {"verb": ...} or {"stop": [run ids]}; 409 with the reason when the verb does not
    apply. No CORS header: another site's page cannot send the header, nor read an answer."""

    control: Control

    def do_GET(self) -> None:
        if urlparse(self.path).path != "/api/control":
            super().do_GET()
        elif self._allowed():
            self._answer({"control": True, "by": self.control.by})

    def do_POST(self) -> None:
        if not self._allowed():
            return
        found = STEER.match(urlparse(self.path).path)
        if found is None:
            self._answer({"error": "no such action"}, HTTPStatus.NOT_FOUND)
            return
        sweep_id = unquote(found[1])
        try:
            page = self.catalog.page(sweep_id)
        except KeyError:
            self._answer({"error": f"no sweep {sweep_id!r} here"}, HTTPStatus.NOT_FOUND)
            return
        try:
            self._answer({"message": self.control.act(page, json.loads(self._body()))})
        except ValueError as err:  # not JSON, not UTF-8, or BadAction: no action named
            self._answer({"error": str(err)}, HTTPStatus.BAD_REQUEST)
        except SteerError as err:  # the verb does not apply: nothing changed
            self._answer({"error": str(err)}, HTTPStatus.CONFLICT)
        except TrainerError as err:  # the store cannot be written now (a server down, ...)
            self._answer({"error": str(err)}, HTTPStatus.SERVICE_UNAVAILABLE)

    def _allowed(self) -> bool:
        """Whether the request carries the token; answers 403 when not."""
        if self.control.allows(self.headers.get(TOKEN_HEADER)):
            return True
        why = f"the {TOKEN_HEADER} header lacks the token of the URL the dashboard printed"
        self._answer({"error": why}, HTTPStatus.FORBIDDEN)
        return False

    def _body(self) -> bytes:
        """The request's body, at most MAX_BODY bytes (ValueError beyond)."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY:
            raise ValueError(f"a body of {length} bytes: an action takes at most {MAX_BODY}")
        return self.rfile.read(length)

    def _answer(self, body: dict, status=HTTPStatus.OK) -> None:
        self._send(json.dumps(body).encode(), "application/json", status)


def _server(
    catalog: Catalog, host: str, port: int, control: Control | None = None
) -> ThreadingHTTPServer:
    """The HTTP server: read-only (Handler), or with `control`'s token and actions."""
    attrs = {
        "catalog": catalog,
        "page": (resources.files(__package__) / "page.html").read_bytes(),
        "bundle": plotly_bundle(),
    }
    if control is not None:
        attrs["control"] = control
    base = Handler if control is None else ControlHandler
    handler = type("DashboardHandler", (base,), attrs)
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        raise TrainerError(
            f"dashboard: cannot listen on {host}:{port} ({err.strerror or err}): give another "
            "--port (--port 0 takes a free one) or --host."
        ) from None
    server.daemon_threads = True
    return server


def serve(catalog: Catalog, host: str, port: int, control: Control | None = None) -> int:
    """Serve until Ctrl-C; print the URL (with --control, carrying the token: the terminal is
    the only place it is written) and how to reach it from another machine first."""
    server = _server(catalog, host, port, control)
    port = server.server_address[1]
    shown_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    what = f"sweep {catalog.only}" if catalog.only else f"the sweeps in {catalog.where}"
    query = "" if control is None else f"?token={control.token}"
    print(f"dashboard of {what}: http://{shown_host}:{port}/{query}", flush=True)
    if host in ("127.0.0.1", "localhost"):
        print(
            f"from another machine: ssh -N -L {port}:127.0.0.1:{port} <this host>, then open "
            f"http://127.0.0.1:{port}/{query} there; Ctrl-C stops the dashboard",
            flush=True,
        )
    else:
        print(f"listening on {host}: anyone who reaches it sees the page (no login)", flush=True)
        if control is not None:
            print(
                "--control over plain HTTP on a network: whoever can read the traffic can "
                "read the token; prefer 127.0.0.1 and an SSH tunnel",
                flush=True,
            )
    if control is not None:
        print(
            "--control: the page's buttons pause, resume, stop and cancel the sweep and stop "
            "runs, for whoever opens this URL with its token (new at each start; keep it to "
            "yourself)",
            flush=True,
        )
    threading.Thread(target=catalog.warm, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        catalog.close()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `dashboard` subcommand of `python -m trainer.sweep` (its --root and --storage are
    the command's, taken before or after the subcommand)."""
    dash = sub.add_parser(
        "dashboard",
        help="serve a live web page of a sweep, or of the list of sweeps (the [dashboard] extra)",
        description="Serve a live, read-only web page of a sweep (leaderboard, parallel "
        "coordinates, parameter importance, every run's curve, Pareto front, compile cost), or "
        "without SWEEP the list of sweeps, and print its URL. It listens on 127.0.0.1: from "
        "another machine, open an SSH tunnel (ssh -N -L PORT:127.0.0.1:PORT HOST) and browse "
        f"http://127.0.0.1:PORT/ there. With --control the page also steers the sweep, for "
        f"whoever holds the token its printed URL carries. Needs Plotly: {INSTALL}.",
    )
    dash.add_argument("sweep", nargs="?", help="a sweep id or directory (default: list them)")
    dash.add_argument("--port", type=int, default=PORT, help=f"default {PORT}; 0: a free one")
    dash.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only: reach it through an "
        "SSH tunnel; 0.0.0.0 shows it to the network, without a login)",
    )
    dash.add_argument(
        "--control",
        action="store_true",
        help="add pause / resume / stop / cancel buttons and a stop button per running run; "
        "they act only for a page opened with the random token of the printed URL (default: "
        "read-only)",
    )
    return dash


def main(args: argparse.Namespace, root: Path) -> int:
    """`python -m trainer.sweep dashboard [SWEEP]`: check Plotly, find the sweep(s) under the
    output `root` (or on the --storage server, given before or after `dashboard`), serve."""
    plotly_bundle()  # first: the catalog's figures import plotly
    # lazy: the catalog draws with plotly, the optional extra checked just above
    from trainer.sweep.report.dashboard.catalog import Catalog

    catalog = Catalog(root, args.storage, args.sweep)
    control = Control(args.storage) if args.control else None
    return serve(catalog, args.host, args.port, control)
