"""The dashboard's --control in a real browser (headless chromium through Selenium): the page of
a live sweep, opened with the URL the command printed, stops a running run with its button;
the run ends `stopped` and the page shows it without a reload."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.sweep.report.test_dashboard_browser import _browser, _rows, _wait
from tests.sweep_commands import TRIAL
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow
# one long run (300 epochs of a tiny trial: minutes), stopped from the page long before its end
CONFIG = {
    "method": "grid",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {"trainer.max_epochs": {"values": [300]}},
    "command": TRIAL,
}


def _dashboard(root: Path, sweep_id: str) -> tuple[subprocess.Popen, list[str]]:
    """`dashboard SWEEP --control` as the user starts it, on a free port; (process, the lines
    it printed before serving)."""
    command = [sys.executable, "-m", "trainer.sweep", "--root", str(root), "dashboard", sweep_id]
    process = subprocess.Popen(
        [*command, "--control", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = [process.stdout.readline() for _ in range(3)]
    assert "?token=" in lines[0], "".join(lines) + process.stderr.read()
    return process, lines


def _click(driver, css: str) -> None:
    """Click the element `css` selects; the leaderboard is redrawn as the run logs epochs, so
    an element found just before a redraw is found again."""
    # selenium: the dev extra, checked by _browser before any click
    from selenium.common.exceptions import StaleElementReferenceException

    def clicked() -> bool:
        try:
            driver.find_element("css selector", css).click()
            return True
        except StaleElementReferenceException:
            return False

    _wait(clicked, 10, f"a click on {css}")


def test_the_page_stops_a_running_run_and_shows_it_stopped_without_reload(tmp_path):
    started = time.monotonic()
    driver = _browser(tmp_path / "chromium")
    done: dict = {}
    sweep = threading.Thread(
        target=lambda: done.update(res=run_sweep(CONFIG, SweepOptions(agents=1), root=tmp_path))
    )
    sweep.start()
    store = process = None
    try:
        db = _wait(lambda: next(iter((tmp_path / "sweeps").glob("*/sweep.db")), None), 60)
        store, sweep_id = SweepStore(db), db.parent.name
        run = _wait(lambda: next((r for r in store.runs() if r.state == "running"), None), 60)
        print(f"a run trains: {time.monotonic() - started:.1f} s")
        process, lines = _dashboard(tmp_path, sweep_id)
        url = lines[0].split()[-1]
        token = url.split("?token=")[1]
        driver.get(url)
        _wait(lambda: _rows(driver).get(run.id) == "running", 30, "the run shown running")
        assert driver.current_url.endswith(f"/sweeps/{sweep_id}?token={token}")
        buttons = {v: driver.find_element("id", f"steer-{v}") for v in ("pause", "resume")}
        assert all(b.is_displayed() for b in buttons.values())
        assert buttons["pause"].is_enabled() and not buttons["resume"].is_enabled()
        driver.execute_script("window.notReloaded = true")
        _click(driver, f"#run-{run.id} button.steer")
        _wait(lambda: _alert(driver), 10, "the confirm dialog").accept()
        asked = time.monotonic()
        _wait(lambda: _rows(driver).get(run.id) == "stopped", 30, "the run shown stopped")
        print(f"stopped on the page {time.monotonic() - asked:.1f} s after the click")
        assert store.run(run.id).state == "stopped"
        assert driver.execute_script("return window.notReloaded") is True
        said = driver.find_element("id", "control-message").text
        assert f"run {run.id}: asked to stop" in said
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        sweep.join(60)
        assert not sweep.is_alive() and done["res"]["runs"][0]["state"] == "stopped"
    finally:
        driver.quit()
        if process is not None:
            process.terminate()
            done["out"] = "".join(process.communicate(timeout=30))
        if store is not None and sweep.is_alive() and store.lifecycle()[0] == "running":
            store.steer("cancel", store.get("sweep_id"), "the test")  # a failure above
        sweep.join(60)
        if store is not None:
            store.close()
    assert token not in done["out"]  # printed once, in the URL line, and never logged
    print(f"browser control test: {time.monotonic() - started:.1f} s")


def _alert(driver):
    """The page's open confirm dialog, or None."""
    # selenium: the dev extra, checked by _browser before any dialog
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None
