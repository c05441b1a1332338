"""The kernel log scan: lines that fail a run, less known-harmless ones."""

from __future__ import annotations

import re

# dmesg lines that fail a run (searched case-sensitively unless noted).
DMESG_BAD = [
    re.compile(p)
    for p in (
        r"\bBUG\b",                # BUG:, kernel BUG at, slub "BUG kmalloc-64" (not DEBUG)
        r"WARNING:",
        r"Oops",
        r"general protection",
        r"(?i)leak",
        r"Call Trace",
        r"Poison overwritten",
        r"Object padding",
        r"Redzone",
        r"Padding overwritten",
        r"Object already free",
        r"Freechain corrupt",
        r"Freepointer corrupt",
        r"Bad page",
        r"Bad rss-counter",
        r"page dumped because",
        r"UBSAN",
        r"KASAN",
        r"KFENCE",
        r"Kernel panic",
        r"Unable to handle",
        r"INFO: task .* blocked",
        r"rcu_.*(stall|detected)",
        r"list_(add|del) corruption",
        r"refcount_t:",
        r"double free",
        r"use-after-free",
    )
]
# Known-harmless boot lines that would otherwise match DMESG_BAD (exact
# kernel texts seen on QEMU's emulated CPUs; keep this list narrow).
DMESG_BENIGN = [
    re.compile(p)
    for p in (
        r"RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!",
        r"Spectre V2 : WARNING: Unprivileged eBPF is enabled",
        r"MDS CPU bug present and SMT on, data leak possible",
        r"MMIO Stale Data CPU bug present and SMT on, data leak possible",
        r"TAA CPU bug present and SMT on, data leak possible",
        r"VMSCAPE: SMT on, STIBP is required for full protection",
    )
]


def strip_level(line: str) -> str:
    return re.sub(r"^<\d+>", "", line)


def scan_kernel_log(lines: list[str]) -> list[str]:
    bad = []
    for line in lines:
        text = strip_level(line)
        if any(p.search(text) for p in DMESG_BAD) and not any(p.search(text) for p in DMESG_BENIGN):
            bad.append(text)
    return bad
