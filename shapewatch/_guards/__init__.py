"""The guards: budgets, no-recompile sections, ``freeze`` and ``expect_compiles``.

They observe each miss as the registry commits it.

May import: the monitor, and the reports (a guard's message names the aggregated cause).
"""
