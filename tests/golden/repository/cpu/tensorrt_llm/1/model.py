"""Triton Python model for the trtspec cpu engine (rendered by `trtspec deploy`).

The implementation is trtspec.triton_model.model; this file only points Triton at it. The
backend stub starts an isolated interpreter that ignores PYTHONPATH, so the paths trtspec's
server passes in TRTSPEC_PYTHONPATH (project root, venv site-packages) are added here first.
"""

import os
import site
import sys

_before = list(sys.path)
for _path in os.environ.get("TRTSPEC_PYTHONPATH", "").split(os.pathsep):
    if _path and _path not in sys.path:
        site.addsitedir(_path)  # also runs the .pth files (editable installs)
sys.path[:] = [p for p in sys.path if p not in _before] + _before

from trtspec.triton_model.model import TritonPythonModel  # noqa: E402,F401
