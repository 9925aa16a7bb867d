"""The dashboard in a real browser: Debian's chromium, driven through chromedriver by Selenium,
opens the page of a small real sweep and finds every run and the metric, every chart drawn, no
console error, and a run that finishes while the page is open, shown without a reload."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sweep_commands import TRIAL
from trainer.sweep.__main__ import main as sweep_cli
from trainer.sweep.local import run_sweep
from trainer.sweep.options import SweepOptions
from trainer.sweep.store.database import SweepStore

pytestmark = pytest.mark.slow
CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1500",
    # Parallel coordinates draw with WebGL: without a GPU chromium renders it in software only
    # when asked (its automatic fallback is deprecated); the page is our own, so it may.
    "--enable-unsafe-swiftshader",
)
CONFIG = {
    "method": "random",
    "metric": {"name": "val/acc", "goal": "maximize"},
    "parameters": {
        "optimizer.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 0.3},
        "optimizer.momentum": {"min": 0.0, "max": 0.95},
    },
    "run_cap": 3,
    "command": [*TRIAL, "trainer.max_epochs=3", "data.batch_size=512"],  # 3 steps an epoch
}
# What a chart draws its data with: Plotly's traces (svg), parallel coordinates' WebGL canvas.
DRAWN = """const d = document.getElementById(arguments[0]);
return d.querySelectorAll('.scatterlayer .trace, .barlayer .trace, canvas').length"""


def _browser(profile: Path):
    if not (CHROMIUM.is_file() and DRIVER.is_file()):
        pytest.skip(
            "no headless browser: Debian's chromium and chromium-driver are not installed "
            "(apt-get install chromium chromium-driver, as root; .ci/run does)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (dev extra) missing")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


def _dashboard(root: Path, sweep_id: str) -> tuple[subprocess.Popen, str]:
    """The dashboard as the user starts it, on a free port; (process, the URL it printed)."""
    command = [sys.executable, "-m", "trainer.sweep", "--root", str(root), "dashboard", sweep_id]
    process = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = process.stdout.readline()
    assert "http://127.0.0.1:" in line, line + process.stderr.read()
    return process, line.split()[-1]


def _wait(until, timeout: float = 90.0, what: str = ""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = until()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _rows(driver) -> dict[str, str]:
    """The leaderboard's runs on the page: id → state."""
    script = """return [...document.querySelectorAll('#leaderboard tbody tr')].map(
        tr => [tr.id.slice(4), tr.querySelector('.state').textContent])"""
    return dict(driver.execute_script(script))


def _drawn(driver, chart: str) -> None:
    """Wait until `chart` drew its data (Plotly's traces or canvas) under a title."""
    box = f"chart-{chart}"
    _wait(lambda: driver.execute_script(DRAWN, box), 30, f"the {chart} chart drawn")
    assert driver.find_element("css selector", f"#{box} .gtitle").text, f"{chart}: no title"


def test_the_page_shows_every_run_and_chart_and_a_new_run_without_reload(tmp_path):
    started = time.monotonic()
    driver = _browser(tmp_path / "chromium")
    res = run_sweep(CONFIG, SweepOptions(agents=1, count=2), root=tmp_path)  # 2 of its 3 runs
    sweep_id, first = res["sweep_id"], {r["id"] for r in res["runs"]}
    print(f"sweep of 2 runs: {time.monotonic() - started:.1f} s")
    process, url = _dashboard(tmp_path, sweep_id)
    try:
        driver.get(url)
        _wait(lambda: set(_rows(driver)) == first, what="the sweep's runs on the page")
        assert driver.current_url.endswith(f"/sweeps/{sweep_id}")
        text = driver.find_element("tag name", "body").text
        assert "val/acc" in text and all(run_id in text for run_id in first)
        for chart in ("curves", "parallel", "compile"):
            _drawn(driver, chart)
        assert "needs 3 finished runs" in driver.find_element("id", "chart-importance").text
        print(f"page drawn: {time.monotonic() - started:.1f} s")
        driver.execute_script("window.notReloaded = true")
        summary = lambda: driver.find_element("id", "summary").text  # noqa: E731
        assert sweep_cli(["--root", str(tmp_path), "pause", sweep_id]) == 0
        _wait(lambda: "state: paused (paused by " in summary(), 30, "who paused it, on the page")
        assert sweep_cli(["--root", str(tmp_path), "resume", sweep_id]) == 0
        agent = [sys.executable, "-m", "trainer.agent", sweep_id, "--root", str(tmp_path)]
        subprocess.run([*agent, "--count", "1"], check=True, capture_output=True, timeout=300)
        print(f"third run: {time.monotonic() - started:.1f} s")
        ended = {"finished", "stopped"}
        try:
            _wait(lambda: len(_rows(driver)) == 3 and set(_rows(driver).values()) <= ended, 60)
        except AssertionError:  # what the page showed against the store, to tell which lags
            db = tmp_path / "sweeps" / sweep_id / "sweep.db"
            stored = {r.id: r.state for r in SweepStore(db).runs()}
            status = driver.find_element("id", "status").text
            raise AssertionError(f"page rows {_rows(driver)}, store {stored}, {status}") from None
        _drawn(driver, "importance")  # three finished runs: Optuna's importance now
        assert driver.execute_script("return window.notReloaded") is True
        _save_screenshot(driver, tmp_path)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
        process.terminate()
        process.wait(timeout=30)
    print(f"browser test: {time.monotonic() - started:.1f} s")


def _save_screenshot(driver, tmp_path: Path) -> None:
    """The page as the test saw it: TRAINER_DASHBOARD_SCREENSHOT=PATH copies it to PATH (the
    test itself writes only in its temporary folder)."""
    shot = tmp_path / "dashboard.png"
    driver.save_screenshot(str(shot))
    target = os.environ.get("TRAINER_DASHBOARD_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)
