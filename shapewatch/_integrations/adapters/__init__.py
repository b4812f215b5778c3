"""Adapters: Equinox, Flax NNX and Flax linen seen in the user's terms; IPython's cells named as Jupyter names them.

Each module adapts one framework to the monitor's interface (``_monitor/adapt.py``)
and is imported only once its framework is: :func:`install` asks the monitor to
load it when the framework's module appears in ``sys.modules``. shapewatch depends
on no framework; a new one is one new module here and one line in ``_FRAMEWORKS``.
"""

from __future__ import annotations

import importlib

from shapewatch._monitor import adapt as _adapt

# the framework's module -> the adapter module that registers itself on import
_FRAMEWORKS = {
    "equinox": "shapewatch._integrations.adapters.equinox",
    "flax.nnx": "shapewatch._integrations.adapters.flax_nnx",
    "flax.linen": "shapewatch._integrations.adapters.flax_linen",
    "IPython": "shapewatch._integrations.adapters.ipython_cells",
}
_installed = False


def install() -> None:
    """Loads each framework's adapter once that framework is imported (at once if it is)."""
    global _installed
    if _installed:
        return
    _installed = True
    for module, adapter in _FRAMEWORKS.items():
        _adapt.register_when_imported(module, lambda name=adapter: importlib.import_module(name))
