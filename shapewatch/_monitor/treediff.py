"""The recursive diff of two pytree structures, read from their ``str(treedef)``.

Runs only when two signatures differ in structure (and so only on a miss): it
parses the text JAX prints for a treedef (``PyTreeDef({'in': {'t': *}})``) and
names the innermost path that changed: ``b['in']: keys {'t'} -> {'m','t'}``,
``b['mask']: None -> float32[2]``, ``xs: length 2 -> 3``. A structure it cannot
parse (a custom node whose aux data has no Python-like repr) is shown whole.
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from collections.abc import Callable

_LEAF = "_shapewatch_leaf_"
_PREFIX = "PyTreeDef("


@functools.lru_cache(maxsize=256)
def parse(tree: str) -> ast.expr | None:
    """The treedef text as a Python expression (a leaf ``*`` becomes a name), or None."""
    if not (tree.startswith(_PREFIX) and tree.endswith(")")):
        return None
    try:
        tokens = [(tokenize.NAME, _LEAF) if t.type == tokenize.OP and t.string == "*" else (t.type, t.string)
                  for t in tokenize.generate_tokens(io.StringIO(tree[len(_PREFIX):-1]).readline)]
        return ast.parse(tokenize.untokenize(tokens).strip(), mode="eval").body
    except (SyntaxError, tokenize.TokenError, ValueError):
        return None


def _keys(node: ast.Dict) -> list[object] | None:
    try:
        return [ast.literal_eval(k) for k in node.keys if k is not None]
    except ValueError:
        return None


def key_set(keys: list[object]) -> str:
    """``{'a','b'}``: the keys, each as its repr, sorted."""
    return "{" + ",".join(sorted(repr(k) for k in keys)) + "}"


def _kind(node: ast.expr) -> str:
    if isinstance(node, ast.Name) and node.id == _LEAF:
        return "leaf"
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return {ast.Dict: "dict", ast.List: "list", ast.Tuple: "tuple"}.get(type(node), "node")


def _text(node: ast.expr) -> str:
    text = ast.unparse(node).replace(_LEAF, "*")
    return text if len(text) <= 60 else text[:57] + "..."


def diff(path: str, old: ast.expr, new: ast.expr, describe: Callable[[str, bool], str]) -> list[tuple[str, str, str]]:
    """``(path, old, new)`` for each innermost difference; ``describe(path, in_new)`` names a leaf."""
    kind_old, kind_new = _kind(old), _kind(new)

    def show(node: ast.expr, kind: str, in_new: bool) -> str:
        if kind == "leaf":
            return describe(path, in_new)
        if kind == "None":
            return "None"
        if kind == "dict" and isinstance(node, ast.Dict) and _keys(node) is not None:
            return "dict with keys " + key_set(_keys(node) or [])
        if kind in ("list", "tuple") and isinstance(node, ast.List | ast.Tuple):
            return f"{kind} of {len(node.elts)}"
        return _text(node)

    if kind_old != kind_new:
        return [(path, show(old, kind_old, False), show(new, kind_new, True))]
    if isinstance(old, ast.Dict) and isinstance(new, ast.Dict):
        keys_old, keys_new = _keys(old), _keys(new)
        if keys_old is None or keys_new is None:
            return [] if _text(old) == _text(new) else [(path, _text(old), _text(new))]
        out = []
        if set(keys_old) != set(keys_new):
            out.append((path, "keys " + key_set(keys_old), key_set(keys_new)))
        children_new = dict(zip(keys_new, new.values))
        for key, child in zip(keys_old, old.values):
            if key in children_new:
                out += diff(f"{path}[{key!r}]", child, children_new[key], describe)
        return out
    if isinstance(old, ast.List | ast.Tuple) and isinstance(new, ast.List | ast.Tuple):
        if len(old.elts) != len(new.elts):
            return [(path, f"length {len(old.elts)}", str(len(new.elts)))]
        return [c for i, (a, b) in enumerate(zip(old.elts, new.elts)) for c in diff(f"{path}[{i}]", a, b, describe)]
    if ast.dump(old) != ast.dump(new):
        return [(path, _text(old), _text(new))]
    return []
