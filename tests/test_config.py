"""The SHAPEWATCH_* variables, read at import in a fresh process."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOW = ("import shapewatch\nfrom shapewatch._monitor.config import settings\n"
        "print(settings.report, settings.max_records, settings.max_recompiles, settings.on_excess, settings.enabled)\n")


def python(env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHAPEWATCH")}
    return subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": ROOT, **env}, timeout=300)


@pytest.mark.parametrize("variable, value, valid, setting", [
    ("SHAPEWATCH_MAX_RECORDS", "abc", "an integer >= 1", "max_records stays 1000"),
    ("SHAPEWATCH_MAX_RECOMPILES", "-1", "an integer >= 0", "max_recompiles stays None"),
    ("SHAPEWATCH_ON_EXCESS", "loud", "warn, raise, log", "on_excess stays 'warn'"),
    ("SHAPEWATCH", "maybe", "1 or 0 (also true/false, on/off, yes/no)", "enabled stays True"),
])
def test_a_bad_variable_warns_and_is_ignored_while_the_others_apply(variable, value, valid, setting):
    proc = python({"SHAPEWATCH_REPORT": "full", "SHAPEWATCH_MAX_RECORDS": "7", "SHAPEWATCH_ON_EXCESS": "raise",
                   variable: value})
    assert proc.returncode == 0, proc.stderr
    expected = {"SHAPEWATCH_MAX_RECORDS": "full 1000 None raise True",
                "SHAPEWATCH_MAX_RECOMPILES": "full 7 None raise True",
                "SHAPEWATCH_ON_EXCESS": "full 7 None warn True",
                "SHAPEWATCH": "full 7 None raise True"}[variable]
    assert proc.stdout == expected + "\n"
    assert (f"ShapewatchWarning: [shapewatch] {variable}={value!r} is not valid: use {valid}. "
            f"Ignoring it ({setting}); the other settings apply.") in proc.stderr
    assert proc.stderr.count("ShapewatchWarning") == 1


def test_good_variables_apply():
    proc = python({"SHAPEWATCH_REPORT": "OFF", "SHAPEWATCH_MAX_RECOMPILES": "2", "SHAPEWATCH": "0"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "off 1000 2 warn False\n", "")


@pytest.mark.parametrize("value, report", [("0", "off"), ("false", "off"), ("False", "off"), ("1", "summary"),
                                           ("TRUE", "summary"), ("true", "summary"), (" TRUE ", "summary"),
                                           ("yes", "summary"), ("on", "summary"), ("no", "off"), (" full ", "full")])
def test_report_variable_takes_a_switch_as_jax_flags_do(value, report):
    proc = python({"SHAPEWATCH_REPORT": value})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"{report} 1000 None warn True\n", "")


def test_a_bad_report_variable_names_the_switches_it_accepts():
    proc = python({"SHAPEWATCH_REPORT": "2"})
    assert proc.stdout == "summary 1000 None warn True\n"
    assert ("[shapewatch] SHAPEWATCH_REPORT='2' is not valid: use off, summary, full, or 0/false/no (off) and "
            "1/true/yes/on (summary). Ignoring it (report stays 'summary')") in proc.stderr
