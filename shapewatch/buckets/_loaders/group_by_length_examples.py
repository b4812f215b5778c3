"""One example of ``group_by_length``: its leaves, its length, the structure all share.

:func:`parse_example` flattens and validates one example against the :class:`Spec`
of the examples before it, and changes nothing when it raises. Until the first
batch is built (``Spec.frozen``) the spec may still widen: a leaf's dtype is
promoted to hold every value seen, and (with a custom ``length_of``) a leaf whose
shape stays put while the length changes turns out fixed-size. After that, an
example that does not fit raises and is left out; nothing already held changes.
:func:`build_batch` stacks parsed examples into one padded batch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from .._checks import MAX_LENGTH, check_batch_shape, check_fill, fail, fail_type, is_int

__all__ = ["Spec", "build_batch", "check_spec", "parse_example"]

Item = tuple[list[np.ndarray], int]  # (leaves as numpy, length)


def _is_number_list(x: Any) -> bool:
    """A list of plain numbers (bools included): one sequence leaf, not a pytree."""
    return isinstance(x, list) and all(isinstance(v, int | float | np.number) for v in x)


class Spec:
    """What every example shares: treedef, leaf paths, per-leaf kind, shapes and dtypes."""

    __slots__ = ("_treedef", "_skeleton", "paths", "seq", "shapes", "full", "const", "dtypes", "weak", "frozen",
                 "ints")

    def __init__(self, treedef: Any, paths: list[str], leaves: list[np.ndarray],
                 seq: list[bool], weak: list[bool]) -> None:
        self._treedef = treedef
        self._skeleton = None
        self.paths = paths
        self.seq = seq
        self.shapes = [leaf.shape[1:] if s else leaf.shape for leaf, s in zip(leaves, seq)]
        self.full = [leaf.shape for leaf in leaves]  # the first example's full shapes
        self.const = [True] * len(leaves)  # full shape unchanged in every example so far
        self.dtypes = [leaf.dtype for leaf in leaves]
        self.weak = weak  # dtype not set yet: only empty lists seen
        self.frozen = False  # set once a batch was built: no more widening
        self.ints = [_largest_int(leaf) for leaf in leaves]  # largest |value| of integer leaves seen

    @property
    def treedef(self) -> Any:
        """The examples' structure; a state unpickled rebuilds it here, on first use, from its
        skeleton (so a custom node registered after the state was unpickled still counts)."""
        if self._treedef is None:
            self._treedef = _rebuild(self._skeleton, len(self.paths))
            self._skeleton = None
        return self._treedef

    def __copy__(self) -> Spec:
        new = Spec.__new__(Spec)
        for name in self.__slots__:
            setattr(new, name, getattr(self, name))
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Spec:
        new = Spec.__new__(Spec)
        for name in self.__slots__:  # the treedef and a skeleton are never changed: shared
            value = getattr(self, name)
            setattr(new, name, value if name in ("_treedef", "_skeleton") else copy.deepcopy(value, memo))
        return new

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without jax's own ``PyTreeDef``, whose module path changes between jaxlib
        versions (``jaxlib.xla_extension`` in 0.5, ``jaxlib._jax`` later): a loader's saved state
        would not load after an upgrade of jax. The structure travels as a skeleton instead: the
        example's containers (dicts, tuples, lists, ``None``, namedtuples and custom nodes by their
        own classes) holding, for each leaf, a one-element array of its dtype and rank, rebuilt by
        flattening it. A structure that cannot travel so (a custom node whose unflattening refuses
        such a leaf, or whose instances do not pickle) keeps its treedef, which loads under the
        jax that saved it."""
        state = {name: getattr(self, name) for name in self.__slots__ if name not in ("_treedef", "_skeleton")}
        skeleton = self._skeleton if self._treedef is None else _skeleton(self._treedef, self.dtypes, self.full)
        if skeleton is _NO_SKELETON:
            state["treedef"] = self._treedef
        else:
            state["skeleton"] = skeleton
        return state

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[0] is None:  # saved before: the slots
            state = state[1]
        state = dict(state)
        self._treedef, self._skeleton = state.pop("treedef", None), state.pop("skeleton", None)
        for name in self.__slots__[2:]:
            setattr(self, name, state[name])


_NO_SKELETON = object()


def _skeleton(treedef: Any, dtypes: list[np.dtype], shapes: list[tuple[int, ...]]) -> Any:
    """``treedef``'s containers with a one-element array of each leaf's dtype and rank, when that
    flattens back to ``treedef`` and pickles; else ``_NO_SKELETON``."""
    import pickle

    from jax.tree_util import tree_structure, tree_unflatten

    try:
        leaves = [np.zeros((1,) * len(shape), dtype) for dtype, shape in zip(dtypes, shapes, strict=True)]
        skeleton = tree_unflatten(treedef, leaves)
        if tree_structure(skeleton, is_leaf=_is_number_list) == treedef:
            pickle.dumps(skeleton)  # a node's instance may hold what does not pickle (a lock)
            return skeleton
    except Exception:  # noqa: BLE001 - a custom node's unflatten may refuse the leaves; an instance may not pickle
        pass
    return _NO_SKELETON


def _rebuild(skeleton: Any, leaves: int) -> Any:
    """The treedef of a pickled skeleton, checked: a custom class not registered as a pytree (yet)
    flattens to fewer leaves than the examples had."""
    from jax.tree_util import tree_structure

    treedef = tree_structure(skeleton, is_leaf=_is_number_list)
    if treedef.num_leaves != leaves:
        raise fail(f"load_state_dict: the saved examples' structure has {leaves} leaves, but rebuilt here it has "
                   f"{treedef.num_leaves} ({treedef}): a custom pytree class of the examples is not registered "
                   "in this process; fix: import or register it (jax.tree_util.register_pytree_node) before "
                   "load_state_dict")
    return treedef


def check_spec(spec: Spec) -> None:
    """A state's ``spec`` rebuilds its structure here (else ``ValueError``), before the loader changes."""
    spec.treedef  # noqa: B018 - rebuilt and checked now


def _names(example: Any) -> list[str]:
    """The leaves' key paths, as ``jax.tree_util.keystr`` writes them (for messages)."""
    from jax.tree_util import keystr, tree_flatten_with_path

    flat, _ = tree_flatten_with_path(example, is_leaf=_is_number_list)
    return [keystr(path) or "<root>" for path, _ in flat]


def _flatten(example: Any) -> tuple[list[np.ndarray], list[bool], Any, Any]:
    """(leaves as numpy, which are empty lists, treedef, the example as flattened)."""
    from jax.tree_util import tree_flatten

    if isinstance(example, tuple) and _is_number_list(list(example)):
        example = list(example)  # a bare tuple of numbers is one sequence, like a list
    flat, treedef = tree_flatten(example, is_leaf=_is_number_list)
    leaves, weak = [], []
    for i, leaf in enumerate(flat):
        from_list = isinstance(leaf, list)
        try:
            arr = np.asarray(leaf)
            bad = arr.dtype.kind == "O"
        except (TypeError, ValueError):
            bad = True
        if bad:
            name = _names(example)[i]
            raise fail(f"leaf {name} of an example is not a numeric array; got {leaf!r}")
        if from_list and arr.size == 0:
            arr = np.zeros(arr.shape, dtype=np.int64)
        leaves.append(arr)
        weak.append(from_list and arr.size == 0)
    if not leaves:
        raise fail(f"example has no array leaves; got {example!r}")
    return leaves, weak, treedef, example


def _length(example: Any, leaves: list[np.ndarray], length_of: Callable[[Any], Any]) -> int:
    if length_of is len:
        lens = {leaf.shape[0] for leaf in leaves if leaf.ndim >= 1}
        if not lens:
            raise fail(f"example has no length: no leaf with a leading axis; got {example!r}")
        if len(lens) > 1:
            raise fail(
                f"the leaves of one example disagree on their leading length: {sorted(lens)}; "
                "expected one shared length (pass length_of= to pick the sequence leaves)"
            )
        return lens.pop()
    try:
        length = length_of(example)
    except Exception as exc:
        raise fail(f"length_of failed on an example: {exc!r}") from None
    if not is_int(length):
        raise fail_type(f"length_of must return an int in [0, 2**40]; got {type(length).__name__} {length!r}")
    if not 0 <= length <= MAX_LENGTH:
        raise fail(f"length_of must return an int in [0, 2**40]; got {length!r}")
    return int(length)


def _kind(dtype: np.dtype) -> str:
    """numpy's kind letter, with ml_dtypes' floats (bfloat16, float8_*: kind 'V') as floats."""
    return "f" if dtype.kind == "V" and "float" in dtype.name else dtype.kind


def _float_format(dtype: np.dtype) -> tuple[int, int, int]:
    """(mantissa bits, largest exponent, smallest exponent) of a float dtype, numpy's or ml_dtypes'."""
    import ml_dtypes  # a dependency of jaxlib: always present where jax is

    info = ml_dtypes.finfo(dtype)
    return int(info.nmant), int(info.maxexp), int(info.minexp)


def _specials(dtype: np.dtype) -> tuple[bool, bool]:
    """(has infinities, has NaN) of a float format: float8_e4m3fn has no infinity, float4 neither."""
    with np.errstate(all="ignore"):
        back = np.array([np.inf, np.nan]).astype(dtype).astype(np.float64)
    return bool(np.isinf(back[0])), bool(np.isnan(back[1]))


def _float_holds(outer: np.dtype, inner: np.dtype) -> bool:
    """True when every value of float format ``inner`` is a value of ``outer``.

    Decided from the two formats alone (mantissa bits, exponent range, infinities, NaN), never
    from numpy's or ml_dtypes' casting tables, which differ between releases (ml_dtypes 0.7 lets
    bfloat16 cast to float16 as "same_kind"; earlier releases do not).
    """
    (m_out, hi_out, lo_out), (m_in, hi_in, lo_in) = _float_format(outer), _float_format(inner)
    (inf_out, nan_out), (inf_in, nan_in) = _specials(outer), _specials(inner)
    return (m_out >= m_in and hi_out >= hi_in and lo_out <= lo_in
            and inf_out >= inf_in and nan_out >= nan_in)


def _largest_int(leaf: np.ndarray) -> int:
    """The largest magnitude among the values of an integer or bool leaf (0 for other leaves)."""
    if leaf.dtype.kind not in "iub" or leaf.size == 0:
        return 0
    return max(abs(int(leaf.min())), abs(int(leaf.max())))


def _holds_seen(dtype: np.dtype, before: np.dtype, largest_int: int) -> bool:
    """True when ``dtype`` holds every value held so far: of dtype ``before``, integers up to ``largest_int``."""
    if dtype == before:
        return True
    if _kind(before) == "f":
        return _kind(dtype) == "f" and _float_holds(dtype, before)
    if _kind(dtype) in "iu":
        info = np.iinfo(dtype)
        return before.kind in "iub" and -largest_int >= info.min and largest_int <= info.max
    if _kind(dtype) != "f":
        return False
    mant, _, _ = _float_format(dtype)  # every integer up to 2**(mant + 1) is exact, 0 included
    return largest_int <= 2 ** (mant + 1) and _fits(np.array([0, 1], bool), dtype)


def _common_dtype(a: np.dtype, b: np.dtype) -> np.dtype:
    if _kind(a) == _kind(b) == "f" and "V" in (a.kind, b.kind):
        # An ml_dtypes float (bfloat16, float8_*) meets another float in the smallest of the
        # two, float32 or float64 that holds both formats exactly: bfloat16 and float16 meet
        # in float32, whatever the installed ml_dtypes' promotion tables say.
        for dtype in (a, b, np.dtype(np.float32), np.dtype(np.float64)):
            if _float_holds(dtype, a) and _float_holds(dtype, b):
                return dtype
    return np.result_type(a, b)


def _fits(leaf: np.ndarray, dtype: np.dtype) -> bool:
    """True when every value of ``leaf`` is stored exactly in ``dtype``."""
    if leaf.dtype == dtype or leaf.size == 0 or leaf.dtype.kind == "b" and dtype.kind in "iuf":
        return True
    if leaf.dtype.kind in "iu" and dtype.kind in "iu":  # int <-> uint of one size round-trips: compare ranges
        info = np.iinfo(dtype)
        return bool(leaf.min() >= info.min and leaf.max() <= info.max)
    if _kind(leaf.dtype) == _kind(dtype) == "f" and "V" in (leaf.dtype.kind, dtype.kind):
        return _float_holds(dtype, leaf.dtype)  # by format alone: one rule on every ml_dtypes
    if leaf.dtype.kind in "iub" and _kind(dtype) in "fc":
        pass  # checked value by value: 2**53 + 1 is no float64, False no float8_e8m0fnu (no zero)
    elif np.can_cast(leaf.dtype, dtype, "safe"):
        return True
    elif not np.can_cast(leaf.dtype, dtype, "same_kind"):
        return False
    with np.errstate(all="ignore"):
        back = leaf.astype(dtype).astype(leaf.dtype)
    return np.array_equal(back, leaf, equal_nan=leaf.dtype.kind in "fc")


def _check_pad(pad_value: Any, dtype: np.dtype) -> None:
    check_fill(pad_value, dtype, "pad_value")


def _classify(
    spec: Spec, leaves: list[np.ndarray], length: int, custom: bool
) -> tuple[list[bool], list[bool]]:
    """(is each leaf a sequence now, is its full shape still the first one's), or raise."""
    seq, const = list(spec.seq), list(spec.const)
    for i, leaf in enumerate(leaves):
        name = spec.paths[i]
        const[i] = const[i] and leaf.shape == spec.full[i]
        if seq[i]:
            if leaf.ndim == len(spec.shapes[i]) + 1 and leaf.shape[1:] == spec.shapes[i]:
                if leaf.shape[0] == length:
                    continue
                if custom and not spec.frozen and const[i]:
                    seq[i] = False  # same shape while the length changed: fixed-size
                    continue
                raise fail(
                    f"leaf {name} has leading length {leaf.shape[0]}, but the example's length "
                    f"is {length}; expected the leaves of one example to agree"
                )
            kind = "rank" if leaf.ndim != len(spec.shapes[i]) + 1 else "shape"
            raise fail(
                f"mixed {kind}s: leaf {name} has shape {leaf.shape}, expected (length,) + "
                f"{spec.shapes[i]} as in the examples before"
            )
        if leaf.shape != spec.shapes[i]:
            raise fail(
                f"fixed-size leaf {name} has shape {leaf.shape}, expected {spec.shapes[i]} as in "
                "the examples before"
            )
    if not any(seq):
        raise fail(f"no leaf of the example has the leading length {length}")
    return seq, const


def _dtypes(spec: Spec, leaves: list[np.ndarray], weak: list[bool], pad_value: Any) -> list:
    """The dtypes after this example (promoted while not frozen), or raise."""
    out = list(spec.dtypes)
    for i, leaf in enumerate(leaves):
        if weak[i]:
            continue
        if spec.weak[i] and not spec.frozen:
            out[i] = leaf.dtype
        elif _fits(leaf, out[i]):
            continue
        elif spec.frozen:
            by_format = _kind(leaf.dtype) == _kind(out[i]) == "f" and "V" in (leaf.dtype.kind, out[i].kind)
            what = (f"float format {leaf.dtype}, not every value of which {out[i]} holds" if by_format
                    else f"dtype {leaf.dtype} with values that {out[i]} cannot hold exactly")
            raise fail(
                f"leaf {spec.paths[i]} has {what}; expected {out[i]}, the dtype fixed by the first batch "
                "(cast the examples to one dtype); the example was left out"
            )
        else:
            numeric = {_kind(out[i]), _kind(leaf.dtype)} <= set("biufc")
            try:
                if not numeric and out[i].kind != leaf.dtype.kind:
                    raise TypeError  # numpy would turn numbers into strings
                common = _common_dtype(out[i], leaf.dtype)
            except TypeError:
                raise fail(
                    f"leaf {spec.paths[i]} has dtype {leaf.dtype}, which has no common dtype "
                    f"with {out[i]} of the examples before"
                ) from None
            # The values held so far must keep their value too: numpy's int8 and float8_e4m3fn meet
            # in float8_e4m3fn, where 127 is 128; int64 and float16 in float64, where 2**53 + 1 is not.
            largest = max(spec.ints[i], _largest_int(leaf))
            wider = [d for d in (common, np.dtype(np.float32), np.dtype(np.float64))
                     if numeric and _holds_seen(d, spec.dtypes[i], largest) and _fits(leaf, d)]
            out[i] = wider[0] if wider else common
            if not wider:  # int64 and uint64 meet in float64, which holds neither exactly
                raise fail(
                    f"leaf {spec.paths[i]} has dtype {leaf.dtype} with values that no common dtype with "
                    f"{spec.dtypes[i]} of the examples before holds exactly (numpy's would be {out[i]}); "
                    "cast the examples to one dtype; the example was left out"
                )
        if out[i] != spec.dtypes[i]:
            _check_pad(pad_value, out[i])
    return out


def parse_example(
    example: Any, length_of: Callable[[Any], Any], spec: Spec | None, pad_value: Any
) -> tuple[Item, Spec]:
    """Flatten and validate one example: ``((leaves, length), spec)``.

    ``spec`` is None for the first example, whose structure is returned; later
    examples may widen it: the spec returned is then a widened copy (``spec`` itself
    never changes, so an example parsed twice is parsed the same).
    """
    leaves, weak, treedef, flattened = _flatten(example)
    length = _length(example, leaves, length_of)
    if spec is None:
        seq = [leaf.ndim >= 1 and leaf.shape[0] == length for leaf in leaves]
        if not any(seq):
            raise fail(f"no leaf of the example has the leading length {length}")
        new = Spec(treedef, _names(flattened), leaves, seq, weak)
        for dtype in new.dtypes:
            _check_pad(pad_value, dtype)
        return (leaves, length), new
    if treedef != spec.treedef:
        raise fail(f"examples differ in structure: {treedef} vs the first example's {spec.treedef}")
    seq, const = _classify(spec, leaves, length, length_of is not len)
    dtypes = _dtypes(spec, leaves, weak, pad_value)
    return (leaves, length), _widened(spec, leaves, weak, seq, const, dtypes)


def _widened(spec: Spec, leaves: list[np.ndarray], weak: list[bool], seq: list[bool],
             const: list[bool], dtypes: list) -> Spec:
    """``spec`` after an example that passed every check: itself when nothing changes, else a
    widened copy (``spec`` is never changed in place: an example parsed again after an
    interrupt meets the spec as it was, or as it widened, and passes either way)."""
    shapes = [spec.full[i] if spec.seq[i] and not seq[i] else shape for i, shape in enumerate(spec.shapes)]
    weak_now = [w and (bool(weak[i]) or spec.frozen) for i, w in enumerate(spec.weak)]
    ints = spec.ints  # what a widening must keep; nothing widens after the first batch
    if not spec.frozen:
        ints = [max(n, _largest_int(leaf)) for n, leaf in zip(spec.ints, leaves)]
    if (shapes, weak_now, seq, const, dtypes, ints) == (
            spec.shapes, spec.weak, spec.seq, spec.const, spec.dtypes, spec.ints):
        return spec
    out = copy.copy(spec)
    out.shapes, out.weak, out.seq, out.const, out.dtypes, out.ints = shapes, weak_now, seq, const, dtypes, ints
    return out


def build_batch(spec: Spec, items: list[Item], rows: int, bucket: int, pad_value: Any) -> tuple:
    """Stack ``items`` into ``rows`` rows padded to ``bucket``: ``(tree, lengths, truncated)``.

    Sequences longer than ``bucket`` (a plan with ``overflow="truncate"``) are cut to it.
    """
    from jax.tree_util import tree_unflatten

    check_batch_shape(rows, bucket)
    spec.frozen = True
    lengths = np.zeros(rows, dtype=np.int64)
    lengths[: len(items)] = [min(n, bucket) for _, n in items]
    out_leaves = []
    for i, (is_seq, shape, dtype) in enumerate(zip(spec.seq, spec.shapes, spec.dtypes)):
        full = (rows, bucket, *shape) if is_seq else (rows, *shape)
        arr = np.full(full, pad_value, dtype=dtype)
        for r, (leaves, _) in enumerate(items):
            if is_seq:
                arr[r, : lengths[r]] = leaves[i][: lengths[r]]
            else:
                arr[r] = leaves[i]
        out_leaves.append(arr)
    truncated = sum(n > bucket for _, n in items)
    return tree_unflatten(spec.treedef, out_leaves), lengths, truncated
