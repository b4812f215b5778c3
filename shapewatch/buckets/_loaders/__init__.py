"""The loaders (private): ``group_by_length`` (with ``group_by_length_examples``), ``bucketed``
(with ``bucketed_batches``), ``choose_by_length`` (strategy="auto"), ``pack`` (the packing
batcher), ``batch`` (Batch), ``extended``, ``policies`` (plan= and costs=) and
``loader_checks``; their state_dict(): ``loader_state``, ``bucket_state``, ``loader_state_v1``,
``choose_state``.

Imports nothing here: a module is imported by its own path."""
