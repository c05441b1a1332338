# SPDX-License-Identifier: MIT
"""Reproduction of the paper's experiments: a context that runs the tools
and collects their JSON records, one module per experiment, plots drawn
from the records only.  Entry point: bench/reproduce."""

from .context import Context, ToolError, Unavailable

__all__ = ["Context", "ToolError", "Unavailable"]
