"""`backend=wandb`: create (or join) the sweep on the W&B server and run `wandb agent`s here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trainer import cpu_share
from trainer.sweep.local import write_sweep_yaml

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0


class ServerUnavailable(RuntimeError):
    """No API key, or the W&B server cannot be reached; nothing was started."""


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL


def api_key_present(url: str) -> bool:
    """An API key in WANDB_API_KEY or in ~/.netrc for the server's host (what `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth

    try:
        return bool(read_netrc_auth(host=url))
    except (OSError, ValueError):  # no or unreadable ~/.netrc
        return False


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One TCP connection to the server within `timeout` seconds, no retries."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)

    def connect() -> bool:
        try:
            with socket.create_connection((parsed.hostname, port), timeout=timeout):
                return True
        except OSError:
            return False

    # Name resolution ignores socket timeouts; a daemon thread bounds the whole probe.
    result: list[bool] = []
    probe = threading.Thread(target=lambda: result.append(connect()), daemon=True)
    probe.start()
    probe.join(timeout + 1.0)
    return bool(result and result[0])


def preflight(url: str | None = None) -> None:
    """Raise ServerUnavailable (within a few seconds) unless a key is set and the server answers."""
    url = url or base_url()
    if not api_key_present(url):
        raise ServerUnavailable(
            f"hydra.sweeper.backend=wandb needs a W&B API key for {url}: run `wandb login` or "
            "set WANDB_API_KEY (or use hydra.sweeper.backend=local to sweep offline)."
        )
    if not reachable(url):
        raise ServerUnavailable(
            f"hydra.sweeper.backend=wandb cannot reach {url} within {PROBE_TIMEOUT_S:g} s: check "
            "the network or WANDB_BASE_URL (or use hydra.sweeper.backend=local to sweep offline "
            "and `wandb sync` the runs later)."
        )


def agent_command(path: str, count: int | None) -> list[str]:
    """The `wandb agent` command line one agent process runs."""
    command = [sys.executable, "-m", "wandb", "agent"]
    if count is not None:
        command += ["--count", str(count)]
    return [*command, path]


def run_server_sweep(
    config: dict[str, Any],
    *,
    project: str | None,
    entity: str | None,
    sweep_id: str | None,
    agents: int,
    count: int | None,
    root: Path,
    cpus_per_trial: int | None = None,
) -> dict[str, Any]:
    """Create the sweep (or join `sweep_id`), print the agent line, run `agents` agents, wait."""
    preflight()
    import wandb

    if sweep_id is None:
        sweep_id = wandb.sweep(config, project=project, entity=entity)
        directory = Path(root) / "sweeps" / sweep_id
        directory.mkdir(parents=True, exist_ok=True)
        write_sweep_yaml(config, directory / "sweep.yaml")
    entity = entity or wandb.Api().default_entity
    path = f"{entity}/{project}/{sweep_id}"
    print(f"sweep {sweep_id} on {base_url()}; run agents anywhere with:\n  wandb agent {path}")
    # Trials must report to the server (metrics feed bayes and hyperband): online, whatever
    # logger.mode says (the environment wins over it).
    env = {**os.environ, "WANDB_MODE": "online"}
    processes = []
    for share in cpu_share.plan_shares(cpu_share.process_limits(), agents, cpus_per_trial)[:agents]:
        with cpu_share.inherited_affinity(share.cores):  # its trials inherit the cores and env
            processes.append(
                subprocess.Popen(agent_command(path, count), env={**env, **share.env()})
            )
    codes = [process.wait() for process in processes]
    return {"sweep_id": sweep_id, "backend": "wandb", "path": path, "agent_exit_codes": codes}
