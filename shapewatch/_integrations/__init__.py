"""Integrations: the ways into shapewatch from outside a Python program's own code.

``cli`` (``python -m shapewatch``), ``patch`` (watching every ``jax.jit`` of an
unmodified program), ``pytest_plugin``, ``distributed`` (divergent compiles across
the processes of a ``jax.distributed`` job) and ``demo``.

May import: every other wing. Nothing below imports an integration.
"""
