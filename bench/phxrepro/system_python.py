# SPDX-License-Identifier: MIT
"""Running under the Python that has Debian's python3-matplotlib."""

from __future__ import annotations

import os
import sys


def ensure_matplotlib(program: str) -> None:
    """Re-executes the running script under /usr/bin/python3 when this
    interpreter cannot import matplotlib; exits with a message when that
    one cannot either."""
    # Debian's python3-matplotlib belongs to /usr/bin/python3; a python3
    # earlier on PATH (pyenv, a venv) may lack it.
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system):
            os.execv(system, [system, *sys.argv])
        sys.exit(f"{program}: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
