"""The shape of src/: which way imports point (the training rooms in one layer order without
exemptions, the trial contract a room of its own that both sides import, training never imports
the sweep side, the compile cache a service training calls through one interface), no circle, short functions with few parameters, one
error handler, and an `import trainer` that does nothing but define the package."""

from __future__ import annotations

import ast
import builtins
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import trainer

ROOT = Path(trainer.__file__).parent
SRC = ROOT.parent
# The port of W&B's `sweeps` 0.3.0 keeps upstream's files and functions, so that it diffs against
# the next release: it is exempt from the size rule and the file-name rule, and its circles are
# upstream's.
PORT = "trainer.sweep.search.wandb_sweeps"
# The sweep side: the sweep package, its agent command and the Hydra sweeper plugin.
SWEEP_SIDE = ("trainer.sweep", "trainer.agent", "hydra_plugins.wandb_sweeper")
# The trial contract: what a run reads and writes for the agent that started it (its argv, the
# parameter file, a PBT member's files). Both sides import it; it imports no other project room.
TRIAL = "trainer.trial"
# What the training side may import of the compile cache: the session a run opens and closes.
CACHE_INTERFACE = ("trainer.cache.session", "trainer.cache.workload")
# What the compile cache may import of the rest: the schemas, paths and the one error type.
CACHE_NEEDS = (
    "trainer.config.schema",
    "trainer.config.rules",
    "trainer.errors",
    "trainer.outputs.layout",
)
# The training rooms, lowest first: a module imports its own room and the rooms below it, never
# one above, nor a loose module of trainer/ (`run.py`, `preflight.py`, ... sit above them all).
# No room is exempt: compiling/ compiles (train/ calls it); what measures compile-or-not by
# training steps (compile=auto, warm_only) lives in train/.
LAYERS = (
    "trainer.errors",
    "trainer.trial",
    "trainer.config",
    "trainer.hardware",
    "trainer.data",
    "trainer.outputs",
    "trainer.compiling",
    "trainer.train",
)
# Loose modules of trainer/ beside its packages: entry points, the preflight and the error type.
MAX_LOOSE = 8
# Functions that still take more than 8 parameters (qualified names); the list only shrinks.
OVER_8_PENDING: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The project module an import names (`a.b.c` may be the module a.b's attribute c)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """Every project module `module` imports, at the top or inside a function (a lazy import is
    still an arrow); `from pkg import mod` counts as an import of pkg.mod."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # `from pkg import mod` imports pkg.mod; `from pkg import name` imports pkg itself
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_training(module: str) -> bool:
    return module.startswith("trainer") and not _in(module, (*SWEEP_SIDE, "trainer.cache"))


def test_the_rules_see_every_room():
    rooms = {
        m.split(".")[2] for m in MODULES if m.startswith("trainer.sweep.") and m.count(".") > 2
    }
    assert {"definition", "search", "store", "agents", "report"} <= rooms
    assert any(_is_training(m) for m in MODULES) and PORT in MODULES


# The sweep side's rooms import one way, down this order: the store knows no other room, the
# search engines read the store, the definition room checks a definition with the engines'
# knowledge, and the agents and the report use all three (and never each other). The trial
# contract they share with training is trainer.trial, below them all.
SWEEP_ROOMS = {"store": 0, "search": 1, "definition": 2, "agents": 3, "report": 3}


def _sweep_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if module.startswith("trainer.sweep.") and parts[2] in SWEEP_ROOMS else None


def test_sweep_rooms_import_one_way():
    wrong = sorted(
        f"{m} -> {t}"
        for m in MODULES
        if (room := _sweep_room(m))
        for t in GRAPH[m]
        if (other := _sweep_room(t)) and other != room and SWEEP_ROOMS[other] >= SWEEP_ROOMS[room]
    )
    assert wrong == []


def test_training_never_imports_the_sweep_side():
    """Not even lazily: what a trial shares with its agent is the trial contract, trainer.trial."""
    wrong = sorted(
        f"{m} -> {t}" for m in MODULES if _is_training(m) for t in GRAPH[m] if _in(t, SWEEP_SIDE)
    )
    assert wrong == []


def test_the_trial_contract_is_its_own_light_room():
    """The contract imports no other project room, and importing it loads no other project
    module (it runs before Hydra starts, in every trial)."""
    contract = sorted(m for m in MODULES if _in(m, (TRIAL,)))
    assert {f"{TRIAL}.trial_argv", f"{TRIAL}.trial_params", f"{TRIAL}.pbt_files"} <= set(contract)
    assert not any(_in(m, (TRIAL,)) for m in MODULES if m.startswith("trainer.sweep."))
    wrong = sorted(f"{m} -> {t}" for m in contract for t in GRAPH[m] if not _in(t, (TRIAL,)))
    assert wrong == []
    code = (
        "import sys; "
        + "; ".join(f"import {m}" for m in contract)
        + "; print(sorted(m for m in sys.modules if m.startswith('trainer')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(eval(out.stdout))  # noqa: S307 (a list of names printed above)
    assert loaded == {"trainer", *contract}


def _layer(module: str) -> int | None:
    for i, room in enumerate(LAYERS):
        if _in(module, (room,)):
            return i
    return None


def _loose(module: str) -> bool:
    """A module of trainer/ itself (not of one of its packages), `trainer` aside."""
    path = MODULES[module]
    return path.parent == ROOT and path.name != "__init__.py"


def test_the_training_rooms_import_downward_only():
    wrong = []
    for m in MODULES:
        here = _layer(m)
        if here is None:
            continue
        for t in GRAPH[m]:
            there = _layer(t)
            if (there is not None and there > here) or (there is None and _loose(t)):
                wrong.append(f"{m} -> {t}")
    assert sorted(wrong) == []


def test_the_layers_name_every_training_room():
    rooms = {
        m.split(".")[1] for m in MODULES if m.count(".") >= 2 and MODULES[m].parent.parent == ROOT
    }
    assert rooms - {"sweep", "cache"} == {r.split(".")[1] for r in LAYERS[1:]}


def test_trainer_keeps_few_loose_modules():
    loose = sorted(m for m in MODULES if m.startswith("trainer.") and _loose(m))
    assert len(loose) <= MAX_LOOSE, loose


def test_training_reaches_the_cache_through_its_interface_only():
    wrong = sorted(
        f"{m} -> {t}"
        for m in MODULES
        if _is_training(m)
        for t in GRAPH[m]
        if _in(t, ("trainer.cache",)) and t not in CACHE_INTERFACE
    )
    assert wrong == []


def test_the_cache_imports_no_training_and_no_sweep():
    wrong = sorted(
        f"{m} -> {t}"
        for m in MODULES
        if _in(m, ("trainer.cache",))
        for t in GRAPH[m]
        if not _in(t, ("trainer.cache", *CACHE_NEEDS))
    )
    assert wrong == []


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in GRAPH:
        if v not in index:
            visit(v)
    return found


def test_no_circle_of_imports_outside_the_port():
    circles = [c for c in _cycles() if not all(_in(m, (PORT,)) for m in c)]
    assert circles == []


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node.end_lineno - node.lineno + 1


def test_no_function_over_60_lines():
    long_functions = [
        f"{m}:{name} ({n})"
        for m, path in MODULES.items()
        if not _in(m, (PORT,))
        for name, n in _functions(path)
        if n > 60
    ]
    assert long_functions == []


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller can pass (`self`/`cls` aside; `*args` and `**kwargs` count one each)."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def _qualified(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _qualified(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _qualified(node, f"{prefix}{node.name}.")
        else:
            yield from _qualified(node, prefix)


def _over_8() -> set[str]:
    return {
        f"{m}.{name}"
        for m, path in MODULES.items()
        if not _in(m, (PORT,))
        for name, fn in _qualified(ast.parse(path.read_text()))
        if _parameters(fn) > 8
    }


def test_no_function_takes_more_than_8_parameters():
    """Parameters that travel together are a frozen dataclass; the pending list only shrinks."""
    assert _over_8() - OVER_8_PENDING == set()
    assert OVER_8_PENDING - _over_8() == set(), "done: drop it from OVER_8_PENDING"


def test_run_reads_in_one_screen():
    assert dict(_functions(ROOT / "run.py"))["run"] <= 60


def test_no_two_modules_share_a_name():
    """A newcomer knows from the file name which room they are in. Exempt: packages' __init__
    and __main__; the Hydra plugin's three files (outside trainer/, Hydra's layout); and the
    port of W&B's `sweeps` (PORT), which keeps upstream's file names so that it diffs against
    the next release: its run.py and config/schema.py share their names with trainer/run.py and
    config/schema.py, and the path (search/wandb_sweeps/) says which one is meant."""
    stems: dict[str, list[str]] = {}
    for m, path in MODULES.items():
        if (
            m.startswith("trainer.")
            and path.stem not in ("__init__", "__main__")
            and not _in(m, (PORT,))
        ):
            stems.setdefault(path.stem, []).append(m)
    assert {s: ms for s, ms in stems.items() if len(ms) > 1} == {}


def test_no_module_is_named_like_a_builtin():
    names = {p.stem for p in ROOT.rglob("*.py")} | {p.name for p in ROOT.rglob("*") if p.is_dir()}
    assert not names & set(dir(builtins))


def test_entry_points_exit_through_the_one_handler():
    """No hand-written `sys.exit(...)` on the training side: errors carry their exit code."""
    offenders = []
    for m, path in MODULES.items():
        if not _is_training(m) or path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exit"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sys"
            ):
                offenders.append(f"{m}:{node.lineno}")
    assert offenders == []


def test_import_trainer_has_no_side_effects():
    """`import trainer` imports nothing else (no Hydra, no ConfigStore entry, no exit hook)."""
    code = (
        "import sys, atexit; before = set(sys.modules); n = atexit._ncallbacks(); import trainer;"
        "print(sorted(set(sys.modules) - before), atexit._ncallbacks() - n)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['trainer']", "0"]


# A comment that is only a pragma gives no reason.
PRAGMA = re.compile(r"^#\s*(noqa\b[:\s\w,]*|type:\s*ignore\S*|fmt:\s*\w+)\s*")


def _reasons(text: str) -> dict[int, bool]:
    """Line -> whether it holds a comment that says something (not only a pragma), and
    whether that comment is the whole line."""
    found: dict[int, bool] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and PRAGMA.sub("", tok.string).strip("# "):
            found[tok.start[0]] = not tok.line[: tok.start[1]].strip()
    return found


def _lazy_imports(tree: ast.AST):
    """(import, the first import of the run of import statements it belongs to) of every
    import inside a function."""

    def visit(node: ast.AST, in_function: bool):
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            run_start = None
            for child in getattr(node, field, None) or []:
                if isinstance(child, ast.Import | ast.ImportFrom):
                    run_start = run_start or child
                    if in_function:
                        yield child, run_start
                else:
                    run_start = None
                inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                yield from visit(child, inner)

    yield from visit(tree, False)


def test_every_import_inside_a_function_says_why():
    """An import goes at the top of its module. One inside a function carries its reason in a
    comment on its line, on the line above, or above the run of imports it opens with: the
    start-up time it saves, measured (`# lazy: wandb costs 0.3 s at start-up; ...`), the
    optional extra it needs (`# optional: ...`), or the import circle it avoids (`# circle:`)."""
    silent = []
    for m, path in MODULES.items():
        text = path.read_text()
        reasons = _reasons(text)
        for node, first in _lazy_imports(ast.parse(text)):
            if not (
                node.lineno in reasons
                or reasons.get(node.lineno - 1)
                or reasons.get(first.lineno - 1)
            ):
                silent.append(f"{m}:{node.lineno}")
    assert silent == []
