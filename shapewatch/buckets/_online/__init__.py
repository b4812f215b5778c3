"""Planning online from measured costs (private): ``auto_planner`` (AutoPlanner, the automatic
re-planning) with its exact DP ``dp_within_cap``, ``cost_model`` (compile seconds, a step model),
``step_meter`` (a step through asynchronous dispatch) and ``choose`` (strategy="auto": pack or
bucket).

Imports nothing here: a module is imported by its own path."""
