"""The commands a user can copy from the documentation (README.md, benchmarks/README.md and every
page of docs/), a shell to type them, and the links, anchors and source paths the pages name.

`commands(path)` yields (line number, command) for every line of a fenced `bash` block (`\\`
continuations joined, comments dropped) and every backticked command of a usage table (the
README's `| you want | command |` table, the CPU and CUDA columns of the benchmarks table).
`Shell` runs such a line through bash as a user types it, in a temporary checkout-like folder
with its own HOME and output root, where `python` is the interpreter running the tests.
`links(path)` and `anchors(path)` are a page's relative links and the anchors its headings make
(GitHub's rule); `source_paths(path)` the files, folders and modules of the project it names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """Every page of documentation whose commands, links and paths are checked."""
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]


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
    """Every copyable command of one page, with its line number."""
    lines = path.read_text().splitlines()
    return sorted(_bash_blocks(lines) + _table_commands(lines))


def all_commands() -> dict[str, str]:
    """command -> where it first appears (`README.md:12`, `docs/sweeps.md:40`)."""
    where: dict[str, str] = {}
    for path in pages():
        for number, command in commands(path):
            where.setdefault(command, f"{path.relative_to(ROOT)}:{number}")
    return where


def _prose(lines: list[str]) -> list[tuple[int, str]]:
    """The lines outside fenced blocks, numbered."""
    found, fenced = [], False
    for number, raw in enumerate(lines, 1):
        if raw.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            found.append((number, raw))
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation (backticks, dots, `&`, `=`)
    dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, raw in _prose(path.read_text().splitlines()):
        match = re.match(r"#{1,6} (.+)", raw)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link to another file of the checkout or an anchor."""
    found = []
    for number, raw in _prose(path.read_text().splitlines()):
        for target in re.findall(r"\]\(([^)\s]+)\)", raw):
            if not re.match(r"[a-z]+:", target):
                found.append((number, target))
    return found


# Backticked names of the project's files and folders, and of its modules.
_PATH = re.compile(r"`([\w.\-/]+)`")
_MODULE = re.compile(r"`(trainer(?:\.\w+)+)|python -m ((?:trainer|benchmarks|tests)(?:\.\w+)*)")
# Folders of the checkout a path may start with; anything else (`checkpoints/last.pt`,
# `logs/optimizer.log`) names a file of a run or sweep directory, not of the project.
CHECKOUT = ("src", "tests", "conf", "benchmarks", "docs", ".ci")
# Folders of src/ whose names a page also uses for something else: the metric keys of the
# training split (`train/loss`) and the default output folder (`outputs/sweeps/...`).
NOT_A_FOLDER = ("train", "outputs")


def source_paths(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every project file, folder or module a page names in backticks or
    `python -m`: `src/trainer/run.py`, `sweep/definition/`, `translate.py`, `trainer.sweep.search`."""
    src_dirs = {p.name for p in (ROOT / "src").rglob("*") if p.is_dir()} - set(NOT_A_FOLDER)
    found = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        for name in _PATH.findall(raw):
            first = name.split("/")[0]
            if name.endswith(".py") or ("/" in name and (first in CHECKOUT or first in src_dirs)):
                found.append((number, name))
        for dotted, module in _MODULE.findall(raw):
            found.append((number, dotted or module))
    return found


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
