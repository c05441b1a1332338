# SPDX-License-Identifier: MIT
"""The experiments, in the paper's order.  A module here defines NAME, TITLE,
run(ctx) -> list[dict] and plot(records, ctx, png)."""

from __future__ import annotations

import importlib
import pkgutil

# The paper's order; experiments from later issues are picked up when their
# module exists.
ORDER = ["table2", "fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11",
         "fig12"]


def available() -> dict:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "run") and hasattr(module, "NAME"):
            found[module.NAME] = module
    ordered = {name: found[name] for name in ORDER if name in found}
    ordered.update({name: mod for name, mod in sorted(found.items()) if name not in ordered})
    return ordered
