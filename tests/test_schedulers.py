"""The across-processes layer a loader owns (its scheduler) keeps its state to itself, and touches
no other object's private state: read from the source, so that no code drifts back to free
functions over a loader's attributes."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "shapewatch")
#: the scheduler modules: the agreement across processes and the planner's call sequence
SCHEDULERS = ("schedulers.py", "lockstep.py", "group_by_length_lockstep.py", "bucketed_lockstep.py",
              "pack_lockstep.py")
#: the loaders' attributes that hold their scheduler
HOLDERS = ("_scheduler", "_lockstep")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, ROOT), ast.parse(fh.read())


def _others_private(tree: ast.AST) -> list[str]:
    """``x._name`` where ``x`` is not ``self``: another object's private attribute."""
    return [f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _private(node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


def _through_a_scheduler(tree: ast.AST) -> list[str]:
    """A private attribute of a scheduler reached from outside: ``loader._scheduler._x``, or ``s._x``
    where ``s`` was assigned a loader's scheduler in the same function."""
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    for scope in [tree, *scopes]:
        aliases = {target.id for node in ast.walk(scope) if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Attribute) and node.value.attr in HOLDERS
                   for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)) or node.attr in HOLDERS:
                continue
            inner = node.value
            if (isinstance(inner, ast.Attribute) and inner.attr in HOLDERS) or (
                    isinstance(inner, ast.Name) and inner.id in aliases):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


@pytest.mark.parametrize("module", SCHEDULERS)
def test_a_scheduler_module_touches_no_private_state_but_its_own(module):
    path = os.path.join(PACKAGE, "buckets", "_distributed", module)
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    assert _others_private(tree) == []


def test_no_module_touches_a_schedulers_private_state():
    found = {path: hits for path, tree in _modules() if (hits := _through_a_scheduler(tree))}
    assert found == {}


def test_the_checks_find_what_they_look_for():
    code = ("def f(loader):\n    loader._sent = 0\n    s = loader._scheduler\n    s._records = {}\n"
            "    return loader._lockstep._seed, s.schedule, self._own\n")
    tree = ast.parse(code)
    assert _others_private(tree) == ["line 2: loader._sent", "line 3: loader._scheduler",
                                     "line 4: s._records", "line 5: loader._lockstep._seed",
                                     "line 5: loader._lockstep"]
    assert _through_a_scheduler(tree) == ["line 4: s._records", "line 5: loader._lockstep._seed"]
