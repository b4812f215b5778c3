"""The scheduler a loader owns, in step across processes (private): ``schedulers``
(LocalScheduler, Lockstep), over ``lockstep`` (the session of rounds over jax.distributed's
key-value store), with each loader's Lockstep: ``group_by_length_lockstep``,
``bucketed_lockstep``, ``pack_lockstep``.

Imports nothing here: a module is imported by its own path."""
