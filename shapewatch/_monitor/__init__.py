"""The monitor: what runs inside a cache miss, and the records it leaves.

``jit`` builds the watched function (JAX's own jitted object around a trace hook);
on a miss, ``miss`` reads the ``signature`` and the stack, ``registry`` stores the
``records``, and ``events`` adds the costs that ``jax.monitoring`` reports. Every
JAX internal the monitor reads is named in ``compat``; ``config``, ``errors`` and
``env`` are the settings, exceptions and environment that every wing shares.

May import: jax, numpy and the standard library; nothing else of shapewatch.
"""
