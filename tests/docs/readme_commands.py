"""The commands a user can copy from README.md and benchmarks/README.md, and a shell to type them.

`commands(path)` yields (line number, command) for every line of a fenced `bash` block (`\\`
continuations joined, comments dropped) and every backticked command of a usage table (the
README's `| you want | command |` table, the CPU and CUDA columns of the benchmarks table).
`Shell` runs such a line through bash as a user types it, in a temporary checkout-like folder
with its own HOME and output root, where `python` is the interpreter running the tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READMES = (ROOT / "README.md", ROOT / "benchmarks" / "README.md")
# Headers of the tables whose backticked cells are commands.
COMMAND_TABLES = ("| you want | command |", "| what | CPU | CUDA |")


def _drop_comment(line: str) -> str:
    """The line without a trailing shell comment (a `#` outside quotes, at a word start)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _bash_blocks(lines: list[str]) -> list[tuple[int, str]]:
    found, in_bash, pending, start = [], False, "", 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            in_bash = not in_bash and stripped == "```bash"
            continue
        if not in_bash:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1].strip() + " "
            continue
        command = _drop_comment(pending + stripped).strip()
        pending = ""
        if command:
            found.append((start, command))
    return found


def _table_commands(lines: list[str]) -> list[tuple[int, str]]:
    found, in_table = [], False
    for number, raw in enumerate(lines, 1):
        if raw.startswith(COMMAND_TABLES):
            in_table = True
            continue
        if not raw.startswith("|"):
            in_table = False
        if not in_table or raw.startswith("| ---"):
            continue
        cells = raw.strip().strip("|").split("|")[1:]
        for cell in cells:
            match = re.match(r"\s*`([^`]+)`", cell)
            if match and re.match(r"(python|torchrun)\b", match.group(1)):
                found.append((number, match.group(1)))
    return found


def commands(path: Path) -> list[tuple[int, str]]:
    """Every copyable command of one README, with its line number."""
    lines = path.read_text().splitlines()
    return sorted(_bash_blocks(lines) + _table_commands(lines))


def all_commands() -> dict[str, str]:
    """command -> where it first appears (`README.md:12`)."""
    where: dict[str, str] = {}
    for path in READMES:
        for number, command in commands(path):
            where.setdefault(command, f"{path.relative_to(ROOT)}:{number}")
    return where


WRAPPERS = {
    "python": '#!/bin/sh\nexec "{py}" "$@"\n',
    "torchrun": '#!/bin/sh\nexec "{py}" -m torch.distributed.run "$@"\n',
    "wandb": '#!/bin/sh\nexec "{py}" -m wandb "$@"\n',
}


class Shell:
    """A user's terminal in `home/work`: `python`, `torchrun` and `wandb` run this interpreter."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.home = tmp / "home"
        self.cwd = tmp / "work"
        self.outputs = self.cwd / "outputs"
        bin_dir = tmp / "bin"
        for folder in (self.home, self.cwd, bin_dir):
            folder.mkdir(parents=True, exist_ok=True)
        (self.cwd / "conf").symlink_to(ROOT / "conf")
        for name, text in WRAPPERS.items():
            (bin_dir / name).write_text(text.format(py=sys.executable))
            (bin_dir / name).chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(self.home),
            "TRAINER_OUTPUT_DIR": str(self.outputs),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
        }

    def type(self, line: str, extra: str = "", env: dict | None = None, timeout: float = 300):
        """Run `line extra` through bash; the CompletedProcess, stdout and stderr merged."""
        proc = subprocess.run(
            ["bash", "-c", f"{line} {extra}".strip()],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        proc.out = proc.stdout  # type: ignore[attr-defined]
        return proc

    def runs(self) -> list[Path]:
        """The single-run directories under the output root, oldest first."""
        return sorted(p for p in (self.outputs / "runs").glob("*/*") if p.is_dir())
