"""Flax linen: its frames are library code, so call sites are the user's lines.

A linen program jits its own step with ``jax.jit``: the user's function is the
one traced, and a ``TrainState`` or an optax state is a pytree whose leaves JAX
names by key path (``state.params['Dense_0']['kernel']``, ``state.opt_state[0].mu``).
What linen adds is frames (``state.apply_gradients``, ``Module.apply``) that are
never the call site.
"""

from __future__ import annotations

import flax

from shapewatch._integrations.adapters._common import package_dir
from shapewatch._monitor import adapt as _adapt

_DIR = package_dir(flax)


class FlaxLinenAdapter(_adapt.Adapter):
    name = "flax.linen"

    def library_dirs(self) -> tuple[str, ...]:
        return (_DIR,)


_adapt.register(FlaxLinenAdapter())
