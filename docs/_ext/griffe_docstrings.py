"""A griffe extension for the API pages: shapewatch's docstrings as Markdown.

The docstrings are Google style with two habits of reStructuredText that Markdown
reads otherwise: ``>>>`` examples written as plain paragraphs (Markdown would make them
nested block quotes) and roles such as ``:class:`Buckets``` (shown as literal text).
This extension fences each ``>>>`` example as a Python code block and turns each role
into inline code. It changes what the site shows, never the source; doctests still
read the docstrings as written.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|obj|exc|data|const):`~?([^`]+)`")


def _fence_examples(text: str) -> str:
    """Wraps every run of ``>>>`` lines and their output (up to a blank line) in a fence.

    The fence starts at the margin: a run indented under an ``Example:`` line would otherwise
    be a Markdown indented code block that shows the fence's backticks as text.
    """
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            if out and out[-1].strip():
                out.append("")
            out.append("```python")
            out.extend(textwrap.dedent("\n".join(lines[i:j])).splitlines())
            out.append("```")
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences ``>>>`` examples and unwraps reST roles in every docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrites the object's docstring once the tree is built."""
        if obj.docstring is not None and not obj.is_alias:
            value = _ROLE.sub(r"`\1`", obj.docstring.value)
            obj.docstring.value = _fence_examples(value)
