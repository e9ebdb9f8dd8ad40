"""The import direction of the package, read from the source with `ast` (imports inside functions count too).

Layers, top to bottom: `cli` -> `commands/` -> the core modules, `tasks/`, `pocket/`; `benchmarks/` is support
used only by `commands/` (and scripts and tests outside the package). Within the core, `pocket/` (the pocket
world: its tokenizer, training and evaluation) reads the pocket tasks from `tasks/`, and `tasks/` never imports
`pocket/`: what the pocket tasks share lives in `tasks/pocket_common.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "judgekit"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, absolute; `from judgekit import x` counts as judgekit.x."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


SOURCES = {_module_name(p): imported_modules(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _importers(target: str) -> set[str]:
    return {m for m, imports in SOURCES.items() if any(_inside(i, target) for i in imports)}


def test_the_reader_sees_imports_of_every_form():
    """Guards the rules below against passing vacuously."""
    assert "judgekit.tasks.pocket_code" in SOURCES["judgekit.pocket.train"]  # lazy, inside a function
    assert "judgekit.store.mined" in SOURCES["judgekit.judge.data"]  # from judgekit import store
    assert "judgekit.commands" in SOURCES["judgekit.cli"]
    assert "judgekit.commands._args" in SOURCES["judgekit.commands.generate"]
    assert len(SOURCES) > 40


def test_nothing_below_the_commands_imports_them():
    above = {m for m in SOURCES if _inside(m, "judgekit.commands")} | {"judgekit.cli", "judgekit.__main__"}
    assert sorted(_importers("judgekit.commands") - above) == []


def test_only_the_commands_use_the_benchmarks():
    allowed = {m for m in SOURCES if _inside(m, "judgekit.commands") or _inside(m, "judgekit.benchmarks")}
    assert sorted(_importers("judgekit.benchmarks") - allowed) == []


def test_the_core_never_imports_the_cli():
    """Commands may (`judgekit demo` drives the others through it); the core and the entry point's peers not."""
    commands = {m for m in SOURCES if _inside(m, "judgekit.commands")}
    assert sorted(_importers("judgekit.cli") - commands - {"judgekit.__main__"}) == []


def test_tasks_never_import_the_pocket_world():
    tasks = {m for m in SOURCES if _inside(m, "judgekit.tasks")}
    assert sorted(_importers("judgekit.pocket") & tasks) == []


def _module_graph() -> dict[str, set[str]]:
    """Module -> the judgekit modules it imports (a package import counts as its __init__)."""
    return {m: {i for i in imports if i in SOURCES and i != m} for m, imports in SOURCES.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_the_package():
    """Imports inside functions count: a lazy import still ties two modules together."""
    assert import_cycles(_module_graph()) == []


def test_no_command_imports_another_command():
    """Commands share declarations through commands/_args.py only; what one command does for another (the demo
    runs mining, training and evaluation) is a library call."""
    commands = {m for m in SOURCES if _inside(m, "judgekit.commands") and m != "judgekit.commands"}
    for module in sorted(commands):
        others = {i for i in SOURCES[module] if _inside(i, "judgekit.commands")} - {"judgekit.commands._args"}
        others = {i for i in others if i in commands and i != module}
        assert others == set(), module
    assert "judgekit.cli" not in SOURCES["judgekit.commands.demo"]


def test_the_design_module_map_names_every_module():
    """docs/design.md §7's module map is complete: every module is named by its path, or by its file name in
    its folder's row (the commands, one per sub-command and discovered automatically, by their folder)."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text()
    section = design[design.index("## 7. Shape of the code"): design.index("## 8. Speed")]
    rows = [line for line in section.splitlines() if line.lstrip().startswith("| `")]
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        folder = rel.split("/")[0] + "/" if "/" in rel else None
        if folder == "commands/" and "`commands/`" in section:
            continue
        in_row = folder is not None and any(f"`{folder}`" in r and f"`{path.name}`" in r for r in rows)
        if f"`{rel}`" not in section and not in_row and not (path.name == "__init__.py" and folder is not None
                                                             and f"`{folder}" in section):
            missing.append(rel)
    assert missing == []
