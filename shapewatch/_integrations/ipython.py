"""The IPython extension: ``%load_ext shapewatch`` and the ``%shapewatch`` magic.

``%load_ext shapewatch`` watches every ``jax.jit`` of the notebook from then on,
as ``python -m shapewatch run`` does for a script (also a ``jit`` imported before,
in the notebook's namespace), and counts every compile from then on (those
outside watched functions too). ``%shapewatch`` draws the report in the cell;
``%shapewatch text`` prints it; ``%shapewatch save PATH`` writes the HTML page;
``%shapewatch reset`` clears the records. IPython is imported only by IPython.
"""

from __future__ import annotations

from typing import Any

from shapewatch._integrations import patch

USAGE = ("[shapewatch] usage: %shapewatch (draw the report) | %shapewatch text | "
         "%shapewatch save PATH.html | %shapewatch reset")


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext shapewatch``: watch every jit, register ``%shapewatch``."""
    patch.install()
    namespace = getattr(ipython, "user_ns", None)
    if isinstance(namespace, dict) and patch._original is not None:
        for name, value in list(namespace.items()):
            if value is patch._original:
                namespace[name] = patch._jit
    ipython.register_magic_function(shapewatch_magic, "line", "shapewatch")


def unload_ipython_extension(ipython: Any) -> None:
    """Called by ``%unload_ext shapewatch``: ``jax.jit`` is jax's own again (already-jitted functions stay watched)."""
    original = patch._original
    patch.uninstall()
    namespace = getattr(ipython, "user_ns", None)
    if isinstance(namespace, dict) and original is not None:
        for name, value in list(namespace.items()):
            if value is patch._jit:
                namespace[name] = original


def shapewatch_magic(line: str = "") -> Any:
    """``%shapewatch [text | save PATH | reset]``."""
    import shapewatch

    words = line.split(maxsplit=1)
    command = words[0] if words else "show"
    if command == "show":
        from IPython.display import display

        snap = shapewatch.report()
        display({"text/html": snap._repr_html_(), "text/plain": snap.to_text("full")}, raw=True)
    elif command == "text":
        print(shapewatch.report().to_text("full"))
    elif command == "save" and len(words) == 2:
        path = words[1].strip()
        shapewatch.report().to_html(path)
        print(f"[shapewatch] HTML report written to {path}")
    elif command == "reset":
        shapewatch.reset()
        print("[shapewatch] records cleared.")
    else:
        print(USAGE)
    return None
