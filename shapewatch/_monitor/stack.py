"""The user's call site: the innermost frame that is neither shapewatch's, JAX's, a framework's nor the standard library's."""

from __future__ import annotations

import os
import types

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import compat as _compat

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # shapewatch/
_LIBRARY_DIRS = (_PACKAGE_DIR, *_compat.JAX_DIRS, os.path.dirname(os.__file__) + os.sep + "contextlib.py",
                 os.path.dirname(os.__file__) + os.sep + "functools.py",
                 os.path.dirname(os.__file__) + os.sep + "threading.py")  # a thread's start is never the call
_USER_CODE_IN_PACKAGE = (os.path.join("_integrations", "demo.py"),)  # the built-in demo plays the user


def is_library(filename: str, dirs: tuple[str, ...] = _LIBRARY_DIRS) -> bool:
    if filename.endswith(_USER_CODE_IN_PACKAGE):
        return False
    return filename.startswith(dirs) or filename.startswith("<frozen")


def user_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """The innermost frame of user code at or above ``frame``, or None."""
    dirs = _adapt.library_dirs(_LIBRARY_DIRS)  # with the frameworks' and configure(library_modules=...)
    while frame is not None:
        if not is_library(frame.f_code.co_filename, dirs):
            return frame
        frame = frame.f_back
    return None


def call_site(frame: types.FrameType | None) -> str | None:
    """``file:line`` of the innermost frame of user code at or above ``frame`` (a notebook cell: ``In [3]:2``)."""
    frame = user_frame(frame)
    return None if frame is None else _adapt.place(frame.f_code.co_filename, frame.f_lineno)
