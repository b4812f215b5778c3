"""The shapewatch pytest plugin (registered through the ``pytest11`` entry point).

* ``--shapewatch``: the terminal summary shows the report of every watched
  function over the session, and the tests during which each miss happened.
* ``--shapewatch-json PATH``: writes the session report as JSON (under
  pytest-xdist, one file per worker: ``PATH`` with ``.gw0``, ``.gw1``, ...
  before the extension).
* ``@pytest.mark.shapewatch(max_compiles=N)``: the test fails at the compile
  that exceeds N compiles (all watched functions together) during its call;
  ``no_recompiles=True`` allows the first compile of each function in the
  test (its own warm-up) and fails at any second one.
* The ``shapewatch_records`` fixture: the test's own misses (the session's records stay).

The report is printed once, in the terminal summary: the exit report of the
process is then skipped (a ``SHAPEWATCH_JSON`` file is still written).

The plugin imports JAX only when one of these is used.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

_OUTSIDE = "(outside any test: collection, session fixtures)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("shapewatch", "shapewatch: JAX recompiles")
    group.addoption("--shapewatch", action="store_true", default=False,
                    help="report every JAX recompile of watched functions, and the tests that caused it")
    group.addoption("--shapewatch-json", metavar="PATH", default=None,
                    help="write the shapewatch session report as JSON (one file per xdist worker)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shapewatch(max_compiles=None, no_recompiles=False): fail the test when its call compiles watched "
        "functions more than max_compiles times, or (no_recompiles=True) any function a second time",
    )
    if config.getoption("shapewatch") or config.getoption("shapewatch_json"):
        config.pluginmanager.register(SessionRecorder(config), "shapewatch-session")


class SessionRecorder:
    """Maps every miss of the session to the test that was running."""

    def __init__(self, config: pytest.Config) -> None:
        from shapewatch._guards import guards as _guards  # noqa: F401  (the guards observe first)
        from shapewatch._monitor.registry import registry

        self.config = config
        self.current: str | None = None
        self.lines: dict[str, list[str]] = {}
        self.test_of_seq: dict[int, str] = {}
        self.worker_reports: dict[str, str] = {}
        registry.observers.append(self.observe)

    def observe(self, state: Any, miss: Any) -> None:
        try:
            test = self.current or _OUTSIDE
            self.test_of_seq[miss.seq] = test
            self.lines.setdefault(test, []).append(f"#{miss.seq} {miss.function}: {miss.explanation} [{miss.kind}]")
        except Exception:
            from shapewatch._monitor.errors import internal_failure

            internal_failure("recording the test of a miss")

    def pytest_unconfigure(self) -> None:
        from shapewatch._monitor.registry import registry

        if self.observe in registry.observers:
            registry.observers.remove(self.observe)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        self.current = item.nodeid
        yield
        self.current = None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        import shapewatch

        path = self.config.getoption("shapewatch_json")
        worker = getattr(self.config, "workerinput", None)
        report = shapewatch.report()
        if worker is not None:
            self.printed_elsewhere()  # the controller prints this worker's report
            if path:
                base, ext = os.path.splitext(path)
                report.to_json(f"{base}.{worker['workerid']}{ext or '.json'}")
            self.config.workeroutput["shapewatch"] = self.text(report)
            self.config.workeroutput["shapewatch_worker"] = worker["workerid"]
        elif path and not self.under_xdist():
            report.to_json(path)

    def under_xdist(self) -> bool:
        return bool(getattr(self.config.option, "numprocesses", None)) and self.config.pluginmanager.hasplugin("dsession")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}) or {}
        if "shapewatch" in output:
            self.worker_reports[output.get("shapewatch_worker", "?")] = output["shapewatch"]

    def text(self, report: Any) -> str:
        lines = [report.to_text(mode="full").rstrip()]
        lines.append("")
        lines.append("misses by test:" if self.lines else "no misses during the tests.")
        for test, misses in self.lines.items():
            lines.append(f"  {test}")
            lines += [f"    {m}" for m in misses[:20]]
            if len(misses) > 20:
                lines.append(f"    ... {len(misses) - 20} more")
        return "\n".join(lines)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.config.getoption("shapewatch") or getattr(self.config, "workerinput", None) is not None:
            return
        terminalreporter.write_sep("=", "shapewatch")
        if self.under_xdist():
            path = self.config.getoption("shapewatch_json")
            where = (f"per-worker reports written to {os.path.splitext(path)[0]}.gw*.json" if path
                     else "pass --shapewatch-json PATH to write one file per worker")
            terminalreporter.write_line(
                f"under pytest-xdist each worker recorded its own misses (this controller ran no tests); {where}.")
            for worker, text in sorted(self.worker_reports.items()):
                terminalreporter.write_sep("-", f"shapewatch: worker {worker}")
                terminalreporter.write_line(text)
            return
        import shapewatch

        terminalreporter.write_line(self.text(shapewatch.report()))
        self.printed_elsewhere()

    @staticmethod
    def printed_elsewhere() -> None:
        """The report was shown in the terminal summary: the exit hook does not print it again."""
        from shapewatch._monitor.config import settings

        settings.report = "off"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    marker = item.get_closest_marker("shapewatch")
    if marker is None:
        yield
        return
    from shapewatch._guards import guards as _guards

    kwargs = dict(marker.kwargs)
    max_compiles = kwargs.pop("max_compiles", None)
    no_recompiles = kwargs.pop("no_recompiles", False)
    if kwargs or marker.args or (max_compiles is None) == (not no_recompiles) or (
            max_compiles is not None and (isinstance(max_compiles, bool) or not isinstance(max_compiles, int)
                                          or max_compiles < 0)):
        pytest.fail(f"[shapewatch] bad marker {marker}: use @pytest.mark.shapewatch(max_compiles=N) "
                    "with N >= 0, or @pytest.mark.shapewatch(no_recompiles=True)", pytrace=False)
    if no_recompiles:
        sec = _guards.Section(None, "raise", f"{item.nodeid} (marked shapewatch(no_recompiles=True): "
                              "one compile per function, this is its second)", allow_first=True)
    else:
        sec = _guards.Section(None, "raise", f"{item.nodeid} (marked shapewatch(max_compiles={max_compiles}): "
                              f"the test already had its {max_compiles})", allowance=max_compiles)
    with _guards.section(sec):
        yield


class Records:
    """What the ``shapewatch_records`` fixture hands a test: the misses during the test."""

    def __init__(self, section: Any) -> None:
        self._section = section

    def all(self) -> list[Any]:
        """Every miss of every watched function during the test, oldest first."""
        return list(self._section.misses)

    def misses(self, fn: Any) -> list[Any]:
        """The misses of one watched function during the test, oldest first."""
        from shapewatch._monitor.jit import watched_target
        from shapewatch._monitor.jit_site import code_key_of

        _, function, module, location = code_key_of(watched_target(fn))  # as the misses name it (a cell: In [2]:1)
        return [m for m in self._section.misses if (m.module, m.function, m.location) == (module, function, location)]

    @property
    def compiles(self) -> int:
        """Compiles during the test, all watched functions together."""
        from shapewatch._monitor.records import COMPILING_KINDS

        return sum(m.kind in COMPILING_KINDS for m in self._section.misses)

    def report(self) -> Any:
        """A :class:`shapewatch.Report` of the test's misses only (``unwatched`` is empty)."""
        from shapewatch._reports.report import report_of

        return report_of(self.all())


@pytest.fixture
def shapewatch_records() -> Any:
    """The test's own shapewatch records; the session's records are left as they are.

    Diffs are against the nearest signature compiled before, also in earlier tests
    (a function compiled by an earlier test is not at its "first compile").

    >>> def test_step_compiles_once(shapewatch_records):  # doctest: +SKIP
    ...     step(x); step(x)
    ...     assert shapewatch_records.compiles == 1
    """
    from shapewatch._guards import guards as _guards

    with _guards.section(_guards.Section(None, "collect", "shapewatch_records", every_kind=True)) as sec:
        yield Records(sec)
