"""Checks and messages every bucketing module shares: ``fail``, int and choice checks,
lengths, fill values, rounding, and telling numpy from JAX arrays (private).

Each check exists once, here, so a message reads the same from every entry point.
"""

from __future__ import annotations

import numbers
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

PREFIX = "[shapewatch]"

#: The largest length (and boundary) accepted: 2**40 (about 1.1e12). Far above any real
#: sequence, and low enough that sums of many lengths, squares for the quadratic cost and
#: rounding up to ``multiple_of`` stay exact instead of overflowing int64.
MAX_LENGTH = 2**40


#: The most rows (``batch_size``) or tokens (``token_budget``) of one batch: 2**31 - 1, the
#: largest axis JAX indexes with its default 32-bit integers. A batch of more cannot be padded
#: (it would not fit in memory either: 2**31 rows of one int64 token are 16 GiB).
MAX_BATCH = 2**31 - 1


def check_batch(name: str, value: Any) -> int:
    """Validate ``batch_size`` or ``token_budget``: an int in ``[1, MAX_BATCH]``."""
    value = check_int(name, value, 1)
    if value > MAX_BATCH:
        raise fail(f"{name}={value:,} is above the largest batch that can be allocated, 2**31 - 1 = "
                   f"{MAX_BATCH:,}; fix: pass a {name} of at most {MAX_BATCH:,}")
    return value


def check_multiple_of(value: Any) -> int:
    """``multiple_of``: an int in ``[1, MAX_LENGTH]`` (above it, no boundary could be one)."""
    value = check_int("multiple_of", value, 1)
    if value > MAX_LENGTH:
        raise fail(f"multiple_of={value:,} is above the largest length accepted, 2**40 = {MAX_LENGTH:,}; "
                   f"fix: pass a multiple_of of at most {MAX_LENGTH:,}")
    return value


def check_cells(plan: Any, batch_size: int | None, budget: int | None) -> None:
    """A batch at the plan's largest length must be one that can be allocated: ``batch_size``
    rows (with a token budget: as many rows as fit it, at least one; neither: one row) hold at most
    ``MAX_BATCH`` positions. Checked when a loader is made, not at its first batch."""
    if plan is None:
        return
    top = plan.max_length
    rows = batch_size if batch_size is not None else 1 if budget is None else max(1, budget // top)
    if rows * top > MAX_BATCH:  # the message names the options the user passed
        given = (f"batch_size={batch_size:,}" if batch_size is not None else "one row" if budget is None
                 else f"token_budget={budget:,}")
        raise fail(f"a batch at the largest length {top:,} with {given} holds {rows * top:,} positions, above "
                   f"the most that can be allocated, 2**31 - 1 = {MAX_BATCH:,}; fix: a largest bucket (or row "
                   f"length) of at most {MAX_BATCH // rows:,}, or fewer rows")


def check_batch_shape(rows: int, length: int) -> None:
    """A batch about to be built (``rows`` rows of ``length``) must hold at most ``MAX_BATCH``
    positions. For plans learned or extended while loading, which :func:`check_cells` cannot
    see when the loader is made; raised before anything is taken from the loader."""
    if rows * length > MAX_BATCH:
        raise fail(f"a batch of {rows:,} rows at length {length:,} would hold {rows * length:,} positions, above "
                   f"the most that can be allocated, 2**31 - 1 = {MAX_BATCH:,}; nothing was taken from the "
                   f"loader; fix: fewer rows (batch_size or token_budget; remainder='keep' for the last, "
                   f"short batches) or shorter buckets")


def fail(message: str) -> ValueError:
    """Return a ValueError whose message starts with the library prefix."""
    return ValueError(f"{PREFIX} {message}")


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a ``TypeError``; also a ``ValueError``, what these were
    in 0.1, so that code catching that goes on working for a release."""


def fail_type(message: str) -> ArgumentTypeError:
    """Return the error for an argument of the wrong type, with the library prefix."""
    return ArgumentTypeError(f"{PREFIX} {message}")


def check_callable(name: str, value: Any, optional: bool = False) -> None:
    """Raise (a TypeError) unless ``value`` is callable (or None, when ``optional``)."""
    if not (callable(value) or (optional and value is None)):
        raise fail_type(f"{name} must be {'None or ' if optional else ''}a callable; got "
                        f"{type(value).__name__} {value!r}")


def is_int(value: Any) -> bool:
    """True for Python/numpy integers, False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def is_jax(x: Any) -> bool:
    """True for a JAX array (jax is already imported when one exists: no import cost)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def is_array(x: Any) -> bool:
    """True for a numpy or JAX array."""
    return type(x) is np.ndarray or isinstance(x, np.ndarray) or is_jax(x)


def check_int(name: str, value: Any, minimum: int) -> int:
    """Validate an integer parameter that must be ``>= minimum``."""
    if not is_int(value):
        raise fail_type(f"{name} must be an integer >= {minimum}; got {type(value).__name__} {value!r}")
    if value < minimum:
        raise fail(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Validate an enum-like string parameter, listing the valid values on error."""
    choices = tuple(choices)
    valid = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise fail_type(f"{name} must be a str, one of {valid}; got {type(value).__name__} {value!r}")
    if value not in choices:
        raise fail(f"unknown {name} {value!r}; expected one of {valid}")
    return value


def check_number(name: str, value: Any) -> float:
    """Validate a finite, non-negative real number."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if not ok:
        raise fail_type(f"{name} must be a finite number >= 0; got {type(value).__name__} {value!r}")
    if not np.isfinite(value) or value < 0:
        raise fail(f"{name} must be a finite number >= 0; got {value!r}")
    return float(value)


def _first_bool(values: Any) -> Any:
    """The first bool in a (nested) list or tuple, or None."""
    for v in values:
        if isinstance(v, bool | np.bool_):
            return v
        if isinstance(v, list | tuple):
            found = _first_bool(v)
            if found is not None:
                return found
    return None


def _too_long(value: Any, limit: int | None) -> ValueError:
    top = f"2**40 = {MAX_LENGTH:,}" if limit == MAX_LENGTH else f"{limit or 2**63 - 1:,}"
    shown = f"{value:,}" if isinstance(value, int) else repr(value)
    return fail(f"lengths must be at most {top}; got {shown}")


def as_lengths(
    values: Any, *, allow_empty: bool = False, limit: int | None = MAX_LENGTH
) -> np.ndarray:
    """Convert an int, a sequence or an array of lengths to a flat int64 array.

    Raises:
        ValueError: on negative, NaN, non-integer, bool, non-numeric, above ``limit``
            (default :data:`MAX_LENGTH`) or (unless ``allow_empty``) empty input; the
            message names the offending value.
    """
    if isinstance(values, bool | np.bool_):
        raise fail(f"lengths must be non-negative integers; got {values!r}")
    if isinstance(values, list | tuple):
        found = _first_bool(values)
        if found is not None:
            raise fail(f"lengths must be non-negative integers; got {bool(found)!r} (a bool)")
    try:
        arr = np.asarray(values)
    except OverflowError:  # Python ints beyond 64 bits
        raise _too_long(max(np.ravel(np.asarray(values, dtype=object))), limit) from None
    except (TypeError, ValueError) as exc:  # ragged nested lists and the like
        raise fail(f"lengths must be non-negative integers; got {values!r} ({exc})") from None
    arr = arr.reshape(-1)
    if arr.size == 0:
        if allow_empty:
            return np.zeros(0, dtype=np.int64)
        raise fail("lengths are empty; expected at least one non-negative integer length")
    kind = arr.dtype.kind
    if kind == "O":
        bad = [v for v in arr if not (is_int(v) or isinstance(v, float))]
        if bad:
            raise fail(f"lengths must be non-negative integers; got {bad[0]!r}")
        big = max(arr.tolist())
        if isinstance(big, int) and big > (limit or 2**63 - 1):
            raise _too_long(big, limit)
        arr = arr.astype(np.float64)
        kind = "f"
    if kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            raise fail(f"lengths must be non-negative integers; got {arr[~finite][0].item()!r}")
        frac = arr != np.floor(arr)
        if frac.any():
            raise fail(f"lengths must be non-negative integers; got {arr[frac][0].item()!r}")
        if arr.max() > (limit or 2.0**62):
            raise _too_long(arr.max().item(), limit)
        arr = arr.astype(np.int64)
    elif kind == "u":
        if arr.dtype.itemsize >= 8 and arr.max() >= 2**63:
            raise _too_long(arr.max().item(), limit)
        arr = arr.astype(np.int64, copy=False)
    elif kind == "i":
        arr = arr.astype(np.int64, copy=False)
    else:
        raise fail(
            f"lengths must be non-negative integers; got dtype {arr.dtype} ({arr.flat[0].item()!r})"
        )
    low = arr.min()
    if low < 0:
        raise fail(f"lengths must be non-negative integers; got {int(low)}")
    if limit is not None and arr.max() > limit:
        raise _too_long(int(arr.max()), limit)
    return arr


def round_up(values: np.ndarray | int, multiple: int) -> np.ndarray | int:
    """Round non-negative ``values`` up to a multiple of ``multiple``."""
    if multiple == 1:
        return values
    return -(-values // multiple) * multiple


def check_fill(value: Any, dtype: Any, name: str = "value") -> None:
    """Raise unless ``value`` is stored exactly in ``dtype`` (-1 in uint8, 0.5 in int32 and nan
    in an integer dtype would pad with something else)."""
    dtype = np.dtype(dtype)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stored = np.full((), value, dtype=dtype)
            exact = dtype.kind in "OUSV" or bool(stored == np.asarray(value)) or (
                bool(np.isnan(stored)) and bool(np.isnan(np.asarray(value, dtype=float))))
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact:
        raise fail(f"{name} {value!r} cannot be stored exactly in dtype {dtype}; expected a value of "
                   f"that dtype (e.g. 0)")
