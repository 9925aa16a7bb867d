"""compile.trace=true: torch's compile trace (TORCH_TRACE) of the run, written into the run
directory, and tlparse's HTML report of it when tlparse is installed (`.[trace]`)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from trainer.compiling import torch_private
from trainer.outputs.layout import RunLayout

log = logging.getLogger(__name__)

INSTALL = 'pip install -e ".[trace]"'  # or `pip install tlparse`
TLPARSE_TIMEOUT_S = 600


_ACTIVE: list[Path] = []  # the trace folder of this process, while one is written


def start(layout: RunLayout) -> None:
    layout.compile_trace.mkdir(parents=True, exist_ok=True)
    torch_private.set_trace_dir(str(layout.compile_trace))
    _ACTIVE[:] = [layout.compile_trace]


def abandon() -> None:
    """End a trace an earlier run of this process left open (it failed before finishing)."""
    if _ACTIVE:
        torch_private.set_trace_dir(None)
        _ACTIVE.clear()


def tlparse() -> str | None:
    """tlparse beside this Python (a venv's bin/, not always on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "tlparse"
    return str(beside) if beside.is_file() else shutil.which("tlparse")


def finish(layout: RunLayout) -> Path | None:
    """Stop tracing; write tlparse's report of the trace (or say how to get it). Returns the
    trace file, None when nothing was traced."""
    torch_private.set_trace_dir(None)
    _ACTIVE.clear()
    logs = sorted(layout.compile_trace.glob("*.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        log.warning("compile.trace=true: torch traced nothing (nothing was compiled)")
        return None
    trace, out = logs[-1], layout.compile_report.parent
    tool = tlparse()
    if tool is None:
        log.warning(
            "compile trace: %s. Its HTML report needs tlparse: %s, then tlparse %s -o %s",
            trace, INSTALL, trace, out,
        )  # fmt: skip
        return trace
    done = subprocess.run(
        [tool, str(trace), "-o", str(out), "--no-browser", "--overwrite"],
        capture_output=True,
        text=True,
        timeout=TLPARSE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not layout.compile_report.is_file():
        log.warning("tlparse could not read %s: %s", trace, (done.stderr or done.stdout)[-500:])
    else:
        log.info("compile trace report: %s", layout.compile_report)
    return trace
