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
    assert "judgekit.store" in SOURCES["judgekit.judge_data"]  # from judgekit import store
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
