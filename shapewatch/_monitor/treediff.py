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
import re
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


_PART = re.compile(r"\.[A-Za-z_]\w*|\[[^\[\]]*\]")
_INDEX = re.compile(r"\[\d+\]")


def _parts(path: str, root: str) -> tuple[str, ...] | None:
    """The components of ``path`` below ``root`` (``.embed``, ``[0]``, ``['k']``), or None."""
    rest = path[len(root):]
    parts = tuple(_PART.findall(rest))
    return parts if "".join(parts) == rest else None


def _children(paths: list[tuple[str, ...]], depth: int, prefix: tuple[str, ...]) -> set[str]:
    return {p[depth] for p in paths if len(p) > depth and p[:depth] == prefix}


def _show(children: set[str]) -> str:
    if all(c.startswith(".") for c in children):
        return "{" + ",".join(sorted(c[1:] for c in children)) + "}"
    return "{" + ",".join(sorted(c[1:-1] if c.startswith("[") else c for c in children)) + "}"


def path_diff(root: str, old: dict[str, str], new: dict[str, str],
              describe: Callable[[str, bool], str]) -> list[tuple[str, str, str]] | None:
    """``(path, old, new)`` for each innermost container under ``root`` whose children differ,
    read from the leaf paths of two calls (as the adapters write them: ``model.blocks[1].kernel``):
    ``model.blocks: length 2 -> 3``, ``model.blocks[1]: attributes {bias,kernel} -> {bias,scale}``,
    ``t.b: None -> float32[3]``. ``old`` and ``new`` map each leaf path to its kind (``"array"``,
    ``"static"`` or ``"none"``); ``describe(path, in_new)`` names an array leaf. None when a
    path cannot be read, or nothing differs."""
    def split(kinds: dict[str, str]) -> dict[tuple[str, ...], str] | None:
        out = {}
        for p, kind in kinds.items():
            if p == root or p.startswith((root + ".", root + "[")):
                parts = _parts(p, root)
                if parts is None:
                    return None
                out[parts] = kind
        return out

    a, b = split(old), split(new)
    if a is None or b is None or a == b:
        return None
    found: list[tuple[str, str, str]] = []

    def show(parts: tuple[str, ...], kind: str, in_new: bool) -> str:
        return {"none": "None", "static": "a static value"}.get(kind) or describe(root + "".join(parts), in_new)

    def walk(prefix: tuple[str, ...]) -> None:
        depth = len(prefix)
        here = root + "".join(prefix)
        if prefix in a and prefix in b:  # a leaf in both
            if a[prefix] != b[prefix]:
                found.append((here, show(prefix, a[prefix], False), show(prefix, b[prefix], True)))
            return
        if prefix in a or prefix in b:  # a leaf in one, a container in the other
            found.append((here, show(prefix, a[prefix], False) if prefix in a else "a container",
                          show(prefix, b[prefix], True) if prefix in b else "a container"))
            return
        co, cn = _children(list(a), depth, prefix), _children(list(b), depth, prefix)
        if co != cn:
            if co and cn and all(_INDEX.fullmatch(c) for c in co | cn):
                found.append((here, f"length {len(co)}", str(len(cn))))
            else:
                what = "attributes" if all(c.startswith(".") for c in co | cn) else "keys"
                found.append((here, f"{what} {_show(co)}", _show(cn)))
                return
        for child in sorted(co & cn):
            sub = prefix + (child,)
            if {p: k for p, k in a.items() if p[:depth + 1] == sub} != {
                    p: k for p, k in b.items() if p[:depth + 1] == sub}:
                walk(sub)

    walk(())
    return found or None
