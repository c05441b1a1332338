# SPDX-License-Identifier: MIT
"""Fig 11's peer row: phx-kvcache's trace replay (tools/phx-kvcache), with
the blocks read by kvikio into a pool of GPU memory.

  python -m phxrepro.peers.kv_replay '{"trace": T, "file": F, "block_size": 16384, ...}'

Job keys: trace (a trace file), file (the KV file phx-kvcache wrote),
block_size, max_sequences (0: all), pool_blocks (0: twice the longest
sequence), device (the CUDA device), verify (default true), evict (drop
the file from the page cache before the replay; default true), label.

The replay is phx-kvcache's, rule for rule, so the two rows measure the
same bytes over the same spans:
  - the trace parser of tools/phx-kvcache/trace.cpp (a "Seq" line opens a
    sequence, every "Round" line appends its [...] ids to it, any other
    non-blank line is an error), cut to the first max_sequences;
  - block b lives at file offset b * block_size (kv_file.hpp);
  - the pool's slots come from a FIFO free list (slot_pool.cpp): a
    sequence takes the oldest-freed slots and gives them back after it;
  - one load per sequence: every block of the sequence (all of its
    rounds) is one CuFile.pread future, all issued before any is waited
    on, as Engine::load gets the whole sequence (replay.cpp);
  - io_s sums the loads' wall time, each load's time is one latency,
    e2e_s is the whole replay minus the checks, bandwidth_GBps is
    blocks * block_size / io_s / 1e9, quantiles interpolate linearly;
  - --verify's check: after each load, outside both spans, the sequence's
    slots copied to the host and compared byte for byte with the tools'
    pattern (tools/common/pattern.cpp), which the KV file holds.

One JSON record on stdout with phx-kvcache's engine-record fields
(engine "kvikio"), status "ok", "failed" (a mismatch, a short read, a
file or pool too small), "unavailable" (no kvikio, torch, numpy or CUDA
GPU here, with the reason) or "error" (anything else, its repr).  The
exit status is 0 whenever a record was printed."""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import os
import sys
import time

ENGINE = "kvikio"
TOOL = "phxrepro.peers.kv_replay"

# tools/common/pattern.hpp: the seed every KV file is written with.
PATTERN_SEED = 0x7068786265E7C401
# Bound the host memory a check of one long sequence takes (its expected
# bytes and their 64-bit intermediates are built a group of blocks at a time).
CHECK_GROUP_BYTES = 64 << 20


class TraceError(ValueError):
    """A malformed trace, named by file and line as trace.cpp names it."""


class ReplayFailure(RuntimeError):
    """The replay could not do its job: phx-kvcache's status "failed"."""


class Unavailable(RuntimeError):
    """The peer cannot run on this machine: status "unavailable"."""


# -- the trace ----------------------------------------------------------------
@dataclasses.dataclass
class Sequence:
    id: str
    blocks: list[int]


@dataclasses.dataclass
class Trace:
    name: str
    sequences: list[Sequence]

    def block_count(self) -> int:
        return sum(len(s.blocks) for s in self.sequences)

    def largest_block(self) -> int:
        return max((b for s in self.sequences for b in s.blocks), default=0)

    def longest_sequence(self) -> int:
        return max((len(s.blocks) for s in self.sequences), default=0)


def _conversation_id(line: str) -> str:
    key = "conversation id: "
    at = line.find(key)
    if at < 0:
        return ""
    start = at + len(key)
    end = line.find(")", start)
    return line[start:] if end < 0 else line[start:end]


def _block_ids(line: str, where: str) -> list[int]:
    """trace.cpp's parse_ids: the ids between the first '[' and the next
    ']', separated by spaces and commas; each id an unsigned 64-bit decimal
    followed by ',', ' ' or the ']'."""
    open_at = line.find("[")
    close_at = line.find("]", 0 if open_at < 0 else open_at)
    if open_at < 0 or close_at < 0:
        raise TraceError(f"{where}: a Round line without a [...] list")
    text, p, ids = line[open_at + 1:close_at], 0, []
    while True:
        while p < len(text) and text[p] in " ,":
            p += 1
        if p == len(text):
            return ids
        q = p
        while q < len(text) and "0" <= text[q] <= "9":
            q += 1
        # from_chars refuses no digits and values past 64 bits; the id must
        # end at a separator or the list's end.
        if q == p or int(text[p:q]) >= 1 << 64 or (q < len(text) and text[q] not in ", "):
            raise TraceError(f'{where}: bad block id near "{text[p:p + 12]}"')
        ids.append(int(text[p:q]))
        p = q


def parse_trace(text: str, name: str) -> Trace:
    """trace.cpp's parse_trace over the whole file's text."""
    trace = Trace(name, [])
    # std::getline splits at '\n' only: a '\r' stays in the line, and a line
    # of nothing but blanks and '\r' is skipped.
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("Seq"):
            trace.sequences.append(Sequence(_conversation_id(line), []))
        elif line.startswith("Round"):
            if not trace.sequences:
                raise TraceError(f"{name}:{number}: a Round line before any Seq line")
            trace.sequences[-1].blocks += _block_ids(line, f"{name}:{number}")
        elif line.strip(" \t\r"):
            raise TraceError(f"{name}:{number}: neither a Seq nor a Round line")
    return trace


def load_trace(path: str, max_sequences: int = 0) -> Trace:
    """The trace at @path, cut to its first max_sequences (0: all) as
    phx-kvcache's --max-sequences cuts it."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="surrogateescape")
    trace = parse_trace(text, os.path.basename(path))
    if max_sequences:
        del trace.sequences[max_sequences:]
    return trace


# -- the plan: which block goes where, sequence by sequence -------------------
@dataclasses.dataclass(frozen=True)
class BlockRead:
    block: int
    slot: int
    file_offset: int
    pool_offset: int


class SlotPool:
    """slot_pool.cpp: a FIFO free list, so after a few sequences have come
    and gone a sequence's slots are out of order, as in a serving engine."""

    def __init__(self, slots: int):
        self._free = collections.deque(range(slots))

    def take(self, count: int) -> list[int]:
        if count > len(self._free):
            raise ReplayFailure(f"the pool has {len(self._free)} free slots, a sequence needs "
                                f"{count} (raise pool_blocks)")
        return [self._free.popleft() for _ in range(count)]

    def give(self, slots: list[int]) -> None:
        self._free.extend(slots)


def default_pool_blocks(trace: Trace) -> int:
    """main.cpp: twice the longest sequence, at least two slots."""
    return 2 * max(trace.longest_sequence(), 1)


def plan_loads(trace: Trace, block_size: int, pool_blocks: int) -> list[list[BlockRead]]:
    """One list per sequence (one Engine::load), in trace order.  The slots
    are taken and given back in the order replay.cpp does, which depends on
    nothing the reads do, so the plan can be made before the clock."""
    pool, loads = SlotPool(pool_blocks), []
    for seq in trace.sequences:
        slots = pool.take(len(seq.blocks))
        loads.append([BlockRead(b, s, b * block_size, s * block_size)
                      for b, s in zip(seq.blocks, slots)])
        pool.give(slots)
    return loads


# -- the pattern the KV file holds ------------------------------------------------
def word_at(index, np):
    """pattern.cpp's word_at (splitmix64's finaliser) over an array of
    word indices (uint64, any shape)."""
    u = np.uint64
    with np.errstate(over="ignore"):  # the arithmetic is modulo 2**64 on purpose
        z = index * u(0x9E3779B97F4A7C15) + u(PATTERN_SEED)
        z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
        return z ^ (z >> u(31))


def pattern_bytes(file_offset: int, length: int, np):
    """The file's bytes [file_offset, file_offset + length): each word's
    bytes little-endian, whatever the host.  Whole words only, which every
    block is (its size and offset are multiples of 4096)."""
    if file_offset % 8 or length % 8:
        raise ValueError(f"pattern_bytes: {length} bytes at {file_offset} are not whole words")
    index = np.arange(file_offset // 8, (file_offset + length) // 8, dtype=np.uint64)
    return word_at(index, np).astype("<u8").view(np.uint8)


# -- the read backends -----------------------------------------------------------------
class ReadBackend:
    """How a replay moves blocks into its pool.  The kvikio backend below
    is the measured one; tests put one with a host pool in its place."""

    def describe(self) -> dict:
        return {}

    def prepare(self, reads: list[BlockRead]):
        """Whatever load() needs for @reads, made before the load's clock
        starts (the harness's bookkeeping, not the reader's work)."""
        return reads

    def load(self, prepared) -> int:
        """Reads every block into its slot, all issued before any is
        waited on; returns when all are in the pool, with the requests it
        took.  Raises ReplayFailure naming the first block that failed."""
        raise NotImplementedError

    def fetch(self, reads: list[BlockRead]):
        """The slots of @reads, in order, as one uint8 numpy array on the host."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _plain(value):
    """A setting as JSON can hold it (kvikio's enums by name)."""
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def kvikio_settings(kvikio) -> dict:
    """kvikio's version and the settings that shape its reads, asked the
    way the installed version answers: defaults.get(name) in newer ones, a
    function per setting in older ones; a setting neither knows is left out."""
    defaults = getattr(kvikio, "defaults", None)
    out = {"kvikio_version": getattr(kvikio, "__version__", None),
           "compat_mode_env": os.environ.get("KVIKIO_COMPAT_MODE")}
    getter = getattr(defaults, "get", None)
    for name, old_name in (("compat_mode", "compat_mode"), ("num_threads", "num_threads"),
                           ("task_size", "task_size"), ("gds_threshold", "gds_threshold"),
                           ("bounce_buffer_size", "bounce_buffer_size")):
        value = None
        if callable(getter):
            try:
                value = getter(name)
            except Exception:  # noqa: BLE001  (an unknown name differs by version)
                value = None
        old = getattr(defaults, old_name, None)
        if value is None and callable(old):
            try:
                value = old()
            except Exception:  # noqa: BLE001
                value = None
        if value is not None:
            out[name] = _plain(value)
    preferred = getattr(defaults, "is_compat_mode_preferred", None)
    if callable(preferred):
        try:
            out["compat_mode_preferred"] = bool(preferred())
        except Exception:  # noqa: BLE001
            pass
    return out


class KvikioBackend(ReadBackend):
    """kvikio.CuFile.pread into slices of one torch allocation on the GPU."""

    def __init__(self, torch, kvikio, path: str, block_size: int, pool_blocks: int,
                 device: int):
        self.torch, self.block_size = torch, block_size
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        torch.cuda.init()
        self.pool = torch.empty(pool_blocks * block_size, dtype=torch.uint8, device=self.device)
        torch.cuda.synchronize(self.device)  # the context and the pool exist before any clock
        self.settings = kvikio_settings(kvikio)
        self.file = kvikio.CuFile(path, "r")
        # One untimed read, as phx-kvcache's cufile engine probes the file and
        # its gather engines prepare before the replay: kvikio opens what it
        # opens at its first read (thread pool, bounce buffers).  Slot 0's
        # bytes are overwritten by the loads.
        self.load(self.prepare([BlockRead(0, 0, 0, 0)]))

    def describe(self) -> dict:
        return {"library": "kvikio", "pool_memory": "device", "torch": self.torch.__version__,
                "requests": "one CuFile.pread per block; a sequence's all issued, then waited on",
                **self.settings}

    def prepare(self, reads):
        bs = self.block_size
        return [(r, self.pool[r.pool_offset:r.pool_offset + bs]) for r in reads]

    def load(self, prepared) -> int:
        bs = self.block_size
        futures = [self.file.pread(view, bs, r.file_offset) for r, view in prepared]
        # Every future is waited on before a failure is raised: none may
        # still be writing into the pool afterwards.
        failure = None
        for (r, _), future in zip(prepared, futures):
            try:
                got = future.get()
                if got != bs and failure is None:
                    failure = f"block {r.block}: {got} of {bs} bytes"
            except Exception as exc:  # noqa: BLE001
                if failure is None:
                    failure = f"block {r.block}: {exc!r}"
        # The data is in GPU memory, not on its way, when the clock stops.
        self.torch.cuda.synchronize(self.device)
        if failure:
            raise ReplayFailure(failure)
        return len(prepared)

    def fetch(self, reads):
        torch = self.torch
        slots = torch.tensor([r.slot for r in reads], dtype=torch.long, device=self.device)
        rows = self.pool.view(-1, self.block_size).index_select(0, slots)
        return rows.cpu().numpy().reshape(-1)

    def close(self) -> None:
        self.file.close()


# -- the replay ------------------------------------------------------------------------
@dataclasses.dataclass
class ReplayStats:
    sequences: int = 0
    blocks: int = 0
    bytes: int = 0
    requests: int = 0
    io_seconds: float = 0.0  # inside the loads
    e2e_seconds: float = 0.0  # the whole replay but the checks
    latencies: list = dataclasses.field(default_factory=list)  # seconds per sequence load
    blocks_checked: int = 0
    mismatches: int = 0
    first_mismatch: str = ""


def check_load(backend: ReadBackend, reads: list[BlockRead], block_size: int,
               stats: ReplayStats, np) -> None:
    """replay.cpp's check_sequence: the load's slots fetched at once, each
    block compared with the pattern at its file offset; one mismatch per
    wrong block, the first one named as phx-kvcache names it."""
    if not reads:
        return
    got = backend.fetch(reads).reshape(len(reads), block_size)
    group = max(1, CHECK_GROUP_BYTES // block_size)
    for start in range(0, len(reads), group):
        part = reads[start:start + group]
        # Each block's expected bytes: the words from its file offset on.
        first = np.array([r.file_offset // 8 for r in part], dtype=np.uint64)
        index = first[:, None] + np.arange(block_size // 8, dtype=np.uint64)[None, :]
        expected = word_at(index, np).astype("<u8").view(np.uint8)
        wrong = got[start:start + len(part)] != expected.reshape(len(part), block_size)
        bad_rows = np.flatnonzero(wrong.any(axis=1))
        stats.blocks_checked += len(part)
        for row in bad_rows:
            r = part[row]
            if stats.mismatches == 0:
                at = int(np.argmax(wrong[row]))
                stats.first_mismatch = f"block {r.block} (slot {r.slot}) at byte {at}"
            stats.mismatches += 1


def replay(loads: list[list[BlockRead]], backend: ReadBackend, block_size: int, *,
           verify: bool, np=None, clock=time.perf_counter) -> ReplayStats:
    """replay.cpp's replay(): per sequence, the load timed on its own; the
    checks, when asked for, right after it and outside both spans."""
    stats = ReplayStats()
    checking = 0.0
    start = clock()
    for reads in loads:
        prepared = backend.prepare(reads)
        io_start = clock()
        stats.requests += backend.load(prepared)
        io_end = clock()
        stats.io_seconds += io_end - io_start
        stats.latencies.append(io_end - io_start)
        if verify:
            check_load(backend, reads, block_size, stats, np)
            checking += clock() - io_end
        stats.sequences += 1
        stats.blocks += len(reads)
    stats.e2e_seconds = clock() - start - checking
    stats.bytes = stats.blocks * block_size
    return stats


def quantile(values: list[float], q: float) -> float:
    """replay.cpp's quantile: linear interpolation between order
    statistics; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# -- the job ---------------------------------------------------------------------------
def base_record(job: dict) -> dict:
    """main.cpp's base_record, with this module as the tool."""
    rec = {"tool": TOOL, "trace": os.path.basename(job["trace"]),
           "max_sequences": int(job.get("max_sequences", 0)),
           "block_size": int(job["block_size"]), "engine": ENGINE, "file": job["file"],
           "device": int(job.get("device", 0))}
    if job.get("label"):
        rec["label"] = job["label"]
    return rec


def stats_fields(stats: ReplayStats, verify: bool) -> dict:
    """main.cpp's measured fields, computed the same way."""
    out = {"sequences": stats.sequences, "blocks": stats.blocks, "bytes": stats.bytes,
           "requests": stats.requests, "io_s": stats.io_seconds, "e2e_s": stats.e2e_seconds,
           "bandwidth_GBps": stats.bytes / stats.io_seconds / 1e9 if stats.io_seconds > 0 else 0.0,
           "e2e_GBps": stats.bytes / stats.e2e_seconds / 1e9 if stats.e2e_seconds > 0 else 0.0,
           "latency_ms": {"p50": quantile(stats.latencies, 0.50) * 1e3,
                          "p95": quantile(stats.latencies, 0.95) * 1e3,
                          "p99": quantile(stats.latencies, 0.99) * 1e3,
                          "max": quantile(stats.latencies, 1.0) * 1e3}}
    if verify:
        out.update({"verified": stats.mismatches == 0, "blocks_checked": stats.blocks_checked,
                    "mismatches": stats.mismatches})
        if stats.mismatches:
            out["first_mismatch"] = stats.first_mismatch
    else:
        out["verified"] = None
    return out


def run_job(job: dict, open_backend, np) -> dict:
    """The replay of @job through the backend open_backend(path,
    block_size, pool_blocks, device) returns; the record, never an
    exception."""
    rec = base_record(job)
    bs, verify = rec["block_size"], bool(job.get("verify", True))
    backend = None
    try:
        if bs <= 0 or bs % 4096:
            raise ReplayFailure(f"block size {bs} is not a positive multiple of 4096")
        try:
            trace = load_trace(job["trace"], rec["max_sequences"])
        except (OSError, TraceError) as exc:
            raise ReplayFailure(str(exc)) from exc
        # phx-kvcache writes the file before its rounds (ensure_kv_file); the
        # peer reads that file and never writes it.
        need = (trace.largest_block() + 1) * bs
        have = os.path.getsize(job["file"]) if os.path.exists(job["file"]) else None
        if have is None or have < need:
            raise ReplayFailure(f"{job['file']} holds {have} bytes, the trace needs {need} at "
                                f"block size {bs} (phx-kvcache --min-file-size writes it)")
        pool_blocks = int(job.get("pool_blocks", 0)) or default_pool_blocks(trace)
        rec["pool_blocks"] = pool_blocks
        loads = plan_loads(trace, bs, pool_blocks)
        backend = open_backend(job["file"], bs, pool_blocks, rec["device"])
        rec["config"] = backend.describe()
        for key in ("kvikio_version", "compat_mode"):
            if key in rec["config"]:
                rec[key] = rec["config"][key]
        if job.get("evict", True):
            # phx-kvcache's engines read with O_DIRECT; kvikio's POSIX path may
            # read through the page cache, which the file's writer (and the
            # probe read) left warm: the peer starts from the disk as they do.
            from . import pagecache
            rec["page_cache"] = pagecache.evict([job["file"]], drop_caches=False)
        stats = replay(loads, backend, bs, verify=verify, np=np)
        rec.update(stats_fields(stats, verify))
        rec["status"] = "failed" if verify and stats.mismatches else "ok"
    except ReplayFailure as exc:
        rec.update({"status": "failed", "error": str(exc)})
    except Exception as exc:  # noqa: BLE001  (one record whatever went wrong)
        rec.update({"status": "error", "error": repr(exc)[:800]})
    finally:
        if backend is not None:
            backend.close()
    return rec


def kvikio_opener():
    """(open_backend, numpy) for the kvikio backend; Unavailable when
    kvikio, torch or numpy does not import or no CUDA GPU is visible."""
    try:
        import numpy as np
        import torch
        import kvikio
        import kvikio.defaults  # noqa: F401  (older versions do not import it with kvikio)
    except Exception as exc:  # noqa: BLE001  (libkvikio failing to load shows here too)
        raise Unavailable(f"import: {exc!r}") from exc
    if not torch.cuda.is_available():
        raise Unavailable("no CUDA GPU visible to torch")

    def open_backend(path, block_size, pool_blocks, device):
        return KvikioBackend(torch, kvikio, path, block_size, pool_blocks, device)
    return open_backend, np


def main(job: dict) -> int:
    try:
        open_backend, np = kvikio_opener()
    except Unavailable as exc:
        print(json.dumps({**base_record(job), "status": "unavailable", "reason": str(exc)}),
              flush=True)
        return 0
    print(json.dumps(run_job(job, open_backend, np)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
