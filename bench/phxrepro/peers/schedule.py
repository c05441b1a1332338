# SPDX-License-Identifier: MIT
"""The order of the jobs: for each file set, round after round, a warm pass
then a cold pass over every loader, each round's loaders rotated by one, so
that no loader always runs first (after the priming read) or right after a
given other one, and slow drift of the disk spreads over all of them."""

from __future__ import annotations


def rotated(items: list, by: int) -> list:
    k = by % len(items) if items else 0
    return items[k:] + items[:k]


def round_robin(loaders: list[str], filesets: list[str], caches: list[str],
                rounds: int) -> list[dict]:
    """[{fileset, round, cache, loader, slot}] in the order they run."""
    jobs = []
    for fileset in filesets:
        for k in range(rounds):
            for cache in caches:
                for slot, loader in enumerate(rotated(loaders, k)):
                    jobs.append({"fileset": fileset, "round": k, "cache": cache,
                                 "loader": loader, "slot": slot})
    return jobs
