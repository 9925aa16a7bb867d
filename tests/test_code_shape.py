"""The shape the training side keeps: short functions and modules, one orchestration function
that fits a screen, one error handler, no module shadowing a builtin."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import trainer

ROOT = Path(trainer.__file__).parent
# The training side: everything but the sweep package and its agent entry point.
TRAINING = sorted(
    p
    for p in ROOT.rglob("*.py")
    if "sweep" not in p.relative_to(ROOT).parts and p.name != "agent.py"
)


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node.end_lineno - node.lineno + 1


# The size rule covers the whole src/ tree: the training side, the sweep side, the plugin.
SRC = ROOT.parent
EVERY_MODULE = sorted(SRC.rglob("*.py"))
# CLI argument tables may run past 60 lines; none does today. Entries are "path:function".
ARGUMENT_TABLES: set[str] = set()


def test_the_size_rule_sees_the_sweep_side_and_the_plugin():
    parts = {part for p in EVERY_MODULE for part in p.relative_to(SRC).parts}
    assert {"trainer", "sweep", "methods", "hydra_plugins"} <= parts


def test_no_function_over_60_lines_and_no_module_over_300():
    long_functions = [
        f"{p.relative_to(SRC)}:{name} ({n})"
        for p in EVERY_MODULE
        for name, n in _functions(p)
        if n > 60 and f"{p.relative_to(SRC)}:{name}" not in ARGUMENT_TABLES
    ]
    long_modules = [
        str(p.relative_to(SRC)) for p in EVERY_MODULE if len(p.read_text().splitlines()) > 300
    ]
    assert long_functions == [] and long_modules == []


def test_run_reads_in_one_screen():
    lengths = dict(_functions(ROOT / "run.py"))
    assert lengths["run"] <= 60


def test_no_module_is_named_like_a_builtin():
    names = {p.stem for p in TRAINING} | {p.name for p in ROOT.iterdir() if p.is_dir()}
    assert not names & set(dir(builtins))


def test_entry_points_exit_through_the_one_handler():
    """No hand-written `sys.exit(...)` outside trainer.errors: errors carry their exit code."""
    offenders = []
    for path in TRAINING:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exit"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sys"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
