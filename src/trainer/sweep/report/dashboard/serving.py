"""The dashboard's HTTP side, on the standard library's ThreadingHTTPServer: the page, Plotly's
JavaScript bundle from the installed `plotly` package (no internet needed), and the JSON the
page polls (/api/sweeps, /api/sweeps/<id>). It only reads."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from trainer.errors import TrainerError

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


class Handler(BaseHTTPRequestHandler):
    """GET only: / and /sweeps/<id> (the page), /plotly.min.js, /api/sweeps[/<id>]."""

    catalog: Catalog
    page: bytes
    bundle: Path
    server_version = "compiled-trainer-dashboard"

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/" and self.catalog.only is not None:
            self.send_response(HTTPStatus.FOUND)
            self.send_header("Location", f"/sweeps/{self.catalog.only}")
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

    def _json(self, body) -> None:
        """Answer with the JSON `body()` makes; 404 for a sweep not served, 500 with the reason
        for a store that cannot be read right now (the page shows it and polls again)."""
        try:
            text, status = body(), HTTPStatus.OK
        except KeyError as err:
            text, status = json.dumps({"error": f"no sweep {err} here"}), HTTPStatus.NOT_FOUND
        except Exception as err:  # noqa: BLE001 - any failure goes to the page, once logged
            print(f"dashboard: {self.path}: {type(err).__name__}: {err}", file=sys.stderr)
            reason = f"{type(err).__name__}: {err}"
            text, status = json.dumps({"error": reason}), HTTPStatus.INTERNAL_SERVER_ERROR
        self._send(text.encode(), "application/json", status)

    def _send(self, body: bytes, kind: str, status=HTTPStatus.OK, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=86400" if cache else "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        """Quiet: the page polls every two seconds; failures are printed by _json."""


def _server(catalog: Catalog, host: str, port: int) -> ThreadingHTTPServer:
    attrs = {
        "catalog": catalog,
        "page": (resources.files(__package__) / "page.html").read_bytes(),
        "bundle": plotly_bundle(),
    }
    handler = type("DashboardHandler", (Handler,), attrs)
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        raise TrainerError(
            f"dashboard: cannot listen on {host}:{port} ({err.strerror or err}): give another "
            "--port (--port 0 takes a free one) or --host."
        ) from None
    server.daemon_threads = True
    return server


def serve(catalog: Catalog, host: str, port: int) -> int:
    """Serve until Ctrl-C; print the URL (and how to reach it from another machine) first."""
    server = _server(catalog, host, port)
    port = server.server_address[1]
    shown_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    what = f"sweep {catalog.only}" if catalog.only else f"the sweeps in {catalog.where}"
    print(f"dashboard of {what}: http://{shown_host}:{port}/", flush=True)
    if host in ("127.0.0.1", "localhost"):
        print(
            f"from another machine: ssh -N -L {port}:127.0.0.1:{port} <this host>, then open "
            f"http://127.0.0.1:{port}/ there; Ctrl-C stops the dashboard",
            flush=True,
        )
    else:
        print(f"listening on {host}: anyone who reaches it sees the page (no login)", flush=True)
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
        f"http://127.0.0.1:PORT/ there. Needs Plotly: {INSTALL}.",
    )
    dash.add_argument("sweep", nargs="?", help="a sweep id or directory (default: list them)")
    dash.add_argument("--port", type=int, default=PORT, help=f"default {PORT}; 0: a free one")
    dash.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only: reach it through an "
        "SSH tunnel; 0.0.0.0 shows it to the network, without a login)",
    )
    return dash


def main(args: argparse.Namespace, root: Path) -> int:
    """`python -m trainer.sweep dashboard [SWEEP]`: check Plotly, find the sweep(s) under the
    output `root` (or on the --storage server, given before or after `dashboard`), serve."""
    plotly_bundle()  # first: the catalog's figures import plotly
    # lazy: the catalog draws with plotly, the optional extra checked just above
    from trainer.sweep.report.dashboard.catalog import Catalog

    return serve(Catalog(root, args.storage, args.sweep), args.host, args.port)
