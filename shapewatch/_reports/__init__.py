"""The reports: everything that reads the monitor's records after the fact.

``analysis`` aggregates causes and fixes (``grouping`` merges those of leaves that
changed the same way in the same misses), ``report`` takes the snapshot and writes
text, JSON and the trace timeline, ``render`` draws text from the JSON form (so a
saved report renders the same), ``load`` reads saved reports, ``merge`` compares
and merges them, ``suggest`` turns traced lengths into a bucket plan.

May import: the monitor and the fixer (``shapewatch.buckets``, for proposed buckets).
"""
