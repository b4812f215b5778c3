"""The house: no import cycles, and imports that point one way between the wings.

Every import counts, also one inside a function (it ties two modules together just
the same); only imports under ``if TYPE_CHECKING:`` are left out. The wings and
what each may import are the architecture page (docs/architecture.md).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "shapewatch"

#: wing -> the wings it may import (the architecture page's diagram, as data).
MAY_IMPORT = {
    "_monitor": set(),
    "buckets": set(),
    "_reports": {"_monitor", "buckets"},
    "_guards": {"_monitor", "_reports"},
    "_timing": {"_monitor"},
    "_integrations": {"_monitor", "_reports", "_guards", "_timing", "buckets"},
}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules that ``name`` imports, wherever the import statement is."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    # An import of a.b.c also runs a and a.b: count the package inits on the way.
    closed = set()
    for target in out:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            closed.add(".".join(parts[:i]))
    return {m for m in closed if m in modules and m != name and not name.startswith(m + ".")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
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

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in MAY_IMPORT else None


def test_no_two_modules_of_the_package_import_each_other():
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_imports_inside_functions_are_counted_and_type_checking_ones_are_not(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    modules = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    assert _imports("pkg.a", modules["pkg.a"], modules) == {"pkg.b"}
    assert _imports("pkg.b", modules["pkg.b"], modules) == set()


@pytest.mark.parametrize("wing", sorted(MAY_IMPORT))
def test_each_wing_imports_only_the_wings_below_it(wing):
    graph = _graph()
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if _wing(module) == wing
        for target in targets
        if target == "shapewatch" or (_wing(target) not in (None, wing) and _wing(target) not in MAY_IMPORT[wing])
    )
    assert wrong == []


def test_every_module_of_the_package_belongs_to_a_wing():
    top_level = {"shapewatch", "shapewatch.__main__"}
    assert sorted(m for m in _modules() if m not in top_level and _wing(m) is None) == []


def test_the_architecture_page_names_every_module():
    # every module of a wing, a subpackage's too, by its name (as a word) in the diagram
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    section = page[: page.index("```", page.index("```") + 3)]
    missing = sorted(m for m in _modules() if _wing(m) is not None and m.count(".") >= 2
                     and not re.search(rf"\b{re.escape(m.rsplit('.', 1)[1])}\b", section))
    assert missing == []


def test_the_architecture_page_has_a_line_for_every_file_of_the_buckets_wing():
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = page[page.index("## The buckets wing"):]
    table = table[: table.index("\n## ")]
    files = sorted(p.relative_to(PACKAGE / "buckets").as_posix() for p in (PACKAGE / "buckets").rglob("*.py"))
    missing = [f for f in files if f"`{f}`" not in table and not f.endswith("__init__.py")]
    assert missing == []
