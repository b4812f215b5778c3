"""The plan and how it is chosen offline (private): ``length_observer`` (LengthObserver),
``buckets`` (Buckets), ``propose`` with ``strategies`` and its exact DP ``dp_at_most_k``,
``explain`` (a plan in words) and ``prior`` (a saved report or observer as a start plan).

Imports nothing here: a module is imported by its own path."""
