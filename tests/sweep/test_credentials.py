"""The W&B credential check of backend=wandb uses wandb's own search (wandb.login): a key in
W&B's settings file counts, a malformed key is our clear error, and the process stays offline."""

from __future__ import annotations

import socket
import time

import pytest

from trainer.sweep import server


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return port


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """A home with no ~/.netrc, no W&B settings file and no WANDB_API_KEY."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    return tmp_path


def test_a_key_in_the_wandb_settings_file_is_found(no_credentials, monkeypatch):
    url = f"http://127.0.0.1:{_closed_port()}"
    config_dir = no_credentials / "wandb-config"
    config_dir.mkdir()
    (config_dir / "settings").write_text("[default]\napi_key = " + "k" * 40 + "\n")
    assert server.api_key_present(url)
    # found the key, so the next problem is the unreachable server, not the key
    with pytest.raises(server.ServerUnavailable, match="cannot reach"):
        server.preflight(url)


def test_no_key_anywhere_says_how_to_log_in(no_credentials, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert server.api_key_present("http://127.0.0.1:1")  # found once ...
    monkeypatch.delenv("WANDB_API_KEY")
    with pytest.raises(server.ServerUnavailable, match="wandb login") as err:  # ... not cached
        server.preflight(f"http://127.0.0.1:{_closed_port()}")
    assert err.value.exit_code == 2  # refused like any other setting


def test_a_malformed_key_is_a_clear_error_within_seconds(no_credentials, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "not-a-key")
    started = time.monotonic()
    with pytest.raises(server.ServerUnavailable) as err:
        server.preflight(f"http://127.0.0.1:{_closed_port()}")
    message = str(err.value)
    assert "is not valid" in message and "WANDB_API_KEY" in message and "--relogin" in message
    assert err.value.exit_code == 2
    assert time.monotonic() - started < 5


def test_the_check_leaves_wandb_offline_and_prints_nothing(no_credentials, monkeypatch, capfd):
    import os

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    assert not server.api_key_present(f"http://127.0.0.1:{_closed_port()}")
    assert os.environ["WANDB_MODE"] == "offline" and "WANDB_BASE_URL" not in os.environ
    out, err = capfd.readouterr()
    assert "wandb:" not in out + err
