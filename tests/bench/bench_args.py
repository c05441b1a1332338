# SPDX-License-Identifier: MIT
"""What the bench harness tests share: the repository (and build) folders
given as their leading arguments, taken off sys.argv before unittest reads
it; bench/ on sys.path; and whether an optional module imports here."""

import pathlib
import sys


def folders(build: bool = False) -> tuple[pathlib.Path, pathlib.Path]:
    """(REPO, BUILD) from `test.py [REPO [BUILD]]`: REPO defaults to this
    checkout, BUILD to REPO/build/default (taken from argv only when
    @build).  Puts REPO/bench first on sys.path."""
    repo = pathlib.Path(__file__).resolve().parents[2]
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        repo = pathlib.Path(sys.argv.pop(1)).resolve()
    out = repo / "build" / "default"
    if build and len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        out = pathlib.Path(sys.argv.pop(1)).resolve()
    sys.path.insert(0, str(repo / "bench"))
    return repo, out


def have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False
