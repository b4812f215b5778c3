"""Flax linen: its frames are library code, so call sites are the user's lines.

A linen program jits its own step with ``jax.jit``: the user's function is the
one traced, and a ``TrainState`` or an optax state is a pytree whose leaves JAX
names by key path (``state.params['Dense_0']['kernel']``, ``state.opt_state[0].mu``).
What linen adds is frames (``state.apply_gradients``, ``Module.apply``) that are
never the call site, and ``module.apply`` jitted itself (or in a ``functools.partial``
with its variables): its positional arguments after ``variables`` are those of the
module's ``__call__`` (or of the ``method`` given), and are named by it.
"""

from __future__ import annotations

import inspect
from typing import Any

import flax
from flax import linen

from shapewatch._integrations.adapters._common import package_dir
from shapewatch._monitor import adapt as _adapt

_DIR = package_dir(flax)


class FlaxLinenAdapter(_adapt.Adapter):
    name = "flax.linen"

    def library_dirs(self) -> tuple[str, ...]:
        return (_DIR,)

    def call_signature(self, fun: Any) -> inspect.Signature | None:
        module = getattr(fun, "__self__", None)
        if not isinstance(module, linen.Module) or getattr(fun, "__func__", None) is not linen.Module.apply:
            return None
        return _apply_signature(type(module).__call__)


def _apply_signature(method: Any) -> inspect.Signature | None:
    """``module.apply``'s parameters as a call reads them: ``variables``, then the method's own
    (after ``self``), then ``apply``'s keywords (``rngs``, ``method``, ``mutable``, ...)."""
    try:
        own = list(inspect.signature(method).parameters.values())[1:]
        applies = list(inspect.signature(linen.Module.apply).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    names = {p.name for p in own}
    keywords = [p for p in applies if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in names]
    rest = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    if any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in rest):
        return None
    try:
        return inspect.Signature([applies[0], *rest, *keywords, *(p for p in own if p not in rest)])
    except ValueError:
        return None


_adapt.register(FlaxLinenAdapter())
