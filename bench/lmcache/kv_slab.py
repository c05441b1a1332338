#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""LMCache 0.5.6's own GDS slab path on Phoenix, against its POSIX
local-disk backend: KV chunks stored and retrieved by LMCache's classes,
unchanged, every byte checked (issue 39).

    bench/lmcache/kv_slab.py probe --build BUILD       # one line: what each row would load
    bench/lmcache/kv_slab.py run --build BUILD --out OUT/kv_slab.jsonl \\
        [--rounds 3] [--caches warm,cold] [--tokens 256,1024] [--total-bytes 2GiB]

The chunks have Llama-3-8B's KV layout (32 layers, K and V, 8 KV heads of
128, bf16, LMCache's KV_2LTD object shape [2, 32, tokens, 1024]): 32 MiB
per 256-token chunk, 128 MiB per 1024-token chunk, --total-bytes of them
(2 GiB: 64 or 16 chunks).  Rows ("configs"):

  phx            LMCache's "phx" GDS backend: libphxfile.so from BUILD,
                 found by ctypes.util.find_library("phxfile") through
                 LD_LIBRARY_PATH, as LMCache loads it
  cufile-shim    LMCache's "cufile" GDS backend through Phoenix's
                 libcufile.so (BUILD/lib/cufile_shim first on
                 LD_LIBRARY_PATH: LMCache reaches cuFile through the
                 cufile-python package, whose cufile.bindings does
                 ctypes.CDLL("libcufile.so"))
  cufile-nvidia  the same backend through NVIDIA's libcufile (the CUDA
                 wheel's or toolkit's), recorded as it goes: where cuFile
                 cannot register a file (error 5027) that is the record.
                 Tried in the first round; later rounds only if it worked
  posix          LMCache's local-disk backend (LocalDiskBackend, made by
                 its CreateStorageBackends with local_disk set and
                 local_cpu off, as LMCACHE_LOCAL_DISK configures it): one
                 file per chunk, read by its batched_get_blocking into
                 LocalCPUBackend's pinned memory objects
  phx-lanes4     phx with PHX_STREAM_LANES=4: four threads read each
                 chunk's pieces at once instead of the op's I/O thread
                 alone (not a goal row: "compare" records set it beside
                 phx, to decide the option's default by)
  odirect-raw    no LMCache at all: the fastest plain program a user would
                 write to put these chunks on this disk with O_DIRECT
                 (RawODirect: one preallocated slab file, 4 threads, each
                 with a pinned buffer and a stream of its own, GPU to
                 buffer then pwrite; retrieval the mirror), the yardstick
                 for LMCache's stores: its slab is O_DIRECT, so its stores
                 go to the disk, where its posix backend's stop in the
                 page cache

The GDS rows open the slab with LMCache's initialize_gds_context
(GdsL1Config: the slab file, O_DIRECT as its default), take chunks from
its GDSL1MemoryManager and register a 4-chunk GPU staging buffer with
register_gds_gpu_buffer on a stream of their own, as LMCache's CUDA cache
context does (_TempGPUBuffer, max_batch_size 4).  Both sides move a chunk
between its memory object and a staging slot with LMCache's own dispatch,
gpu_ops.lmcache_memcpy_async_h2d / _d2h (GDSContext.transfer_async READ /
WRITE for a slab chunk, a non-blocking copy from pinned memory for a
local-disk chunk), four chunks at a time, each batch followed by a copy
of the slots into their place in a destination tensor, on the same
stream: a stand-in for LMCache's paged-KV scatter kernel, which makes the
next batch's reads wait for the slots, as they do in LMCache.

What is timed is what a user waits for: from the first call to the whole
destination in GPU memory (torch.cuda.synchronize()), the local-disk
side including its disk reads (batched_get_blocking); --reps times per
chunk size in each process: "first" rows time the first (what the
process's first retrieval of that size costs, lazy setup included),
"steady" rows the median of the others.  Warm: the files read once
before each retrieval; cold: evicted (fsync, POSIX_FADV_DONTNEED;
--drop-caches adds drop_caches) until mincore finds none of their pages.
The chunks are stored first in the same process (LMCache's slab does not
survive a restart), from seeded random bytes on the GPU; after each
retrieval the destination is compared with them byte for byte (on a
mismatch the record says which chunks, which range, and whether the
stored copy was right).  Every (config, cache, round) runs in a fresh
process with CUDA up, configs rotated each round; a failing config is a
record (status "error", where it failed and why), not a stop, and a
worker still running 10 s before --job-timeout-s ends itself with a
"timeout" record of where it was (every thread's Python stack, every
task's kernel wait channel).  The last records: "verify" per config,
"summary" (medians over the rounds), "store_summary" (each row's median
store rate per chunk size, over every cache and round) and "ratio" (the
goals: retrieval at least 1.5x the local-disk backend warm, at least 1x
cold; stores at least 0.95x the raw O_DIRECT writer of the same chunks on
the same disk).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import glob
import json
import os
import pathlib
import shutil
import site
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from phxrepro.experiments.cufile_costs import nvidia_cufile, rotated  # noqa: E402
from phxrepro.peers import pagecache  # noqa: E402
from phxrepro.records import add_round_arguments, goal_ratio, stdout_emitter  # noqa: E402
from phxrepro.records import manifest_header, run_worker  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
CONFIGS = ["phx", "cufile-shim", "cufile-nvidia", "posix", "odirect-raw", "phx-lanes4"]
GDS_BACKEND = {"phx": "phx", "phx-lanes4": "phx", "cufile-shim": "cufile",
               "cufile-nvidia": "cufile"}
# Rows that are phx with an option of the library changed: the variable and value.
PHX_VARIANTS = {"phx-lanes4": ("PHX_STREAM_LANES", "4")}
# The rows that must work: NVIDIA's cuFile is expected to fail on a
# machine without nvidia-fs, and its failure is the record.
MUST_WORK = {"phx", "cufile-shim", "posix", "odirect-raw", "phx-lanes4"}
TOKENS = [256, 1024]
TOTAL_BYTES = 2 * GiB
LAYERS, KV_HEADS, HEAD_DIM, BF16 = 32, 8, 128, 2
STAGING_CHUNKS = 4  # LMCache's CUDA cache context: _TempGPUBuffer(max_batch_size=4)
MODEL = "phx-bench/llama-3-8b"
SLAB_FILE = "lmcache_gds_slab.bin"  # where LMCache's FileGDSBackend puts the slab


def chunk_shape(tokens: int):
    import torch

    return torch.Size([2, LAYERS, tokens, KV_HEADS * HEAD_DIM])  # KV_2LTD


def chunk_bytes(tokens: int) -> int:
    return 2 * LAYERS * tokens * KV_HEADS * HEAD_DIM * BF16


def loaded(name: str) -> list[str]:
    """The files mapped into this process whose name contains @name."""
    found = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and name in os.path.basename(parts[-1]) and parts[-1] not in found:
                found.append(parts[-1])
    return found


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def symbol_file(func) -> str | None:
    """The file a ctypes function's code is in (dladdr): which library
    the backend's calls reach, where torch has NVIDIA's libcufile.so.0
    loaded in every process beside any other."""
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    if not dladdr(ctypes.cast(func, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def io_library(config) -> str | None:
    """Where the GDS row's read call lands: phxFileReadAsync of the
    library LMCache's phx backend loaded, or cuFileReadAsync of the
    libcufile cufile-python opened; None for the rows without GDS
    (posix, odirect-raw)."""
    try:
        if GDS_BACKEND.get(config) == "phx":
            from lmcache.v1.gpu_connector.gds_context import get_gds_context

            return symbol_file(get_gds_context().backend.library().phxFileReadAsync)
        if config.startswith("cufile"):
            from cufile.bindings import libcufile

            return symbol_file(libcufile.cuFileReadAsync)
    except Exception as exc:  # noqa: BLE001
        return f"error: {exc!r}"[:300]
    return None


def lmcache_copies():
    """LMCache's dispatch between a memory object and a GPU buffer
    (gpu_ops), or, where that module does not import, the two calls it
    makes; the first item says which."""
    try:
        from lmcache.v1.gpu_connector.gpu_ops import (lmcache_memcpy_async_d2h,
                                                       lmcache_memcpy_async_h2d)

        return "gpu_ops", lmcache_memcpy_async_h2d, lmcache_memcpy_async_d2h
    except Exception as exc:  # noqa: BLE001  (recorded; the calls below are what it does)
        import torch
        from lmcache.v1.gpu_connector.gds_context import SlabDirection, get_gds_context
        from lmcache.v1.memory_management import GDSMemoryObject

        def h2d(obj, buf):
            if isinstance(obj, GDSMemoryObject):
                get_gds_context().transfer_async(obj, buf, SlabDirection.READ)
            else:
                buf.copy_(obj.tensor.view(torch.uint8).reshape(-1), non_blocking=True)

        def d2h(buf, obj):
            if isinstance(obj, GDSMemoryObject):
                get_gds_context().transfer_async(obj, buf, SlabDirection.WRITE)
            else:
                obj.tensor.view(torch.uint8).reshape(-1).copy_(buf, non_blocking=True)

        return f"direct calls (gpu_ops: {exc!r})"[:300], h2d, d2h


class Gds:
    """One process's GDS slab: LMCache's context, allocator and a
    registered staging buffer of STAGING_CHUNKS of the largest chunk."""

    def __init__(self, job, device, stream):
        import torch
        from lmcache.v1.distributed.config import GdsL1Config
        from lmcache.v1.distributed.memory_manager.gds_l1_memory_manager import (
            GDSL1MemoryManager)
        from lmcache.v1.gpu_connector import gds_context

        self.gc, self.stream = gds_context, stream
        self.location = os.path.join(job["scratch"], "slab")
        self.config = GdsL1Config(file_location=self.location, size_in_bytes=job["total_bytes"],
                                  backend=GDS_BACKEND[job["config"]])
        self.manager = GDSL1MemoryManager(self.config)
        self.context = gds_context.initialize_gds_context(self.config)
        self.staging = torch.empty(STAGING_CHUNKS * chunk_bytes(max(job["tokens"])),
                                   dtype=torch.uint8, device=device)
        with stream_context(self.stream):
            gds_context.register_gds_gpu_buffer(self.staging)
        self.objs = []

    def store(self, tokens, count, source, d2h):
        import torch
        from lmcache.v1.distributed.api import MemoryLayoutDesc

        err, self.objs = self.manager.allocate(
            MemoryLayoutDesc([chunk_shape(tokens)], [torch.bfloat16]), count)
        if not self.objs:
            raise RuntimeError(f"GDSL1MemoryManager.allocate: {err}")
        copy_through_staging(self.objs, source, self.slots(tokens), d2h, to_objects=True,
                             stream=self.stream)
        synchronize()

    def slots(self, tokens):
        size = chunk_bytes(tokens)
        return [self.staging[i * size:(i + 1) * size] for i in range(STAGING_CHUNKS)]

    def files(self):
        return [os.path.join(self.location, SLAB_FILE)]

    def stored(self, i, size):
        """Chunk @i's bytes in the slab, read by the host (diagnosis only)."""
        fd = os.open(self.files()[0], os.O_RDONLY)
        try:
            return os.pread(fd, size, self.objs[i].slab_offset)
        finally:
            os.close(fd)

    def retrieve(self, tokens, dest, h2d):
        copy_through_staging(self.objs, dest, self.slots(tokens), h2d, to_objects=False,
                             stream=self.stream)
        synchronize()
        return {}

    def release(self):
        self.manager.free(self.objs)
        self.objs = []

    def close(self):
        with stream_context(self.stream):
            self.gc.deregister_gds_gpu_buffer(self.staging)
        self.context.close()


class Posix:
    """LMCache's local-disk backend as CreateStorageBackends makes it,
    with a GPU staging buffer like the GDS rows' (unregistered)."""

    def __init__(self, job, device, stream):
        import torch
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend import CreateStorageBackends

        self.stream = stream
        biggest = max(job["tokens"])
        self.dir = os.path.join(job["scratch"], "disk")
        # The pinned pool holds one retrieval (all chunks at once, as one
        # batched_get_blocking of a request does) and the staging of stores.
        pool = job["total_bytes"] + (STAGING_CHUNKS + 2) * chunk_bytes(biggest)
        self.config = LMCacheEngineConfig.from_defaults(
            chunk_size=biggest, local_cpu=False, max_local_cpu_size=pool / GiB,
            local_disk=self.dir, max_local_disk_size=(2 * job["total_bytes"]) / GiB)
        self.metadata = LMCacheMetadata(
            model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
            kv_dtype=torch.bfloat16, kv_shape=(LAYERS, 2, biggest, KV_HEADS, HEAD_DIM),
            chunk_size=biggest)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.backends = CreateStorageBackends(self.config, self.metadata, self.loop)
        self.cpu = self.backends["LocalCPUBackend"]
        self.disk = self.backends["LocalDiskBackend"]
        self.staging = torch.empty(STAGING_CHUNKS * chunk_bytes(biggest), dtype=torch.uint8,
                                   device=device)
        self.keys = []

    def slots(self, tokens):
        size = chunk_bytes(tokens)
        return [self.staging[i * size:(i + 1) * size] for i in range(STAGING_CHUNKS)]

    def store(self, tokens, count, source, d2h):
        """LMCache's store: GPU to a pinned memory object, then
        submit_put_task (its disk threads write the file); done when the
        backend holds every key."""
        import torch
        from lmcache.utils import CacheEngineKey

        self.keys = [CacheEngineKey(MODEL, 1, 0, tokens * 1_000_000 + i, torch.bfloat16)
                     for i in range(count)]
        objs = []
        for _ in range(count):
            obj = self.cpu.allocate(chunk_shape(tokens), torch.bfloat16)
            if obj is None:
                raise RuntimeError("LocalCPUBackend.allocate returned None")
            objs.append(obj)
        self.pinned = bool(objs[0].tensor.is_pinned())
        copy_through_staging(objs, source, self.slots(tokens), d2h, to_objects=True,
                             stream=self.stream)
        synchronize()
        for key, obj in zip(self.keys, objs):
            self.disk.submit_put_task(key, obj)
            obj.ref_count_down()  # the put task holds its own reference until written
        deadline = time.monotonic() + 120
        while not all(self.disk.contains(k) for k in self.keys):
            if time.monotonic() > deadline:
                raise TimeoutError("LocalDiskBackend did not hold every chunk within 120 s")
            time.sleep(0.001)

    def files(self):
        return [self.disk.dict[k].path for k in self.keys]

    def stored(self, i, size):
        """Chunk @i's file, read by the host (diagnosis only)."""
        with open(self.files()[i], "rb") as f:
            return f.read(size)

    def retrieve(self, tokens, dest, h2d):
        start = time.perf_counter()
        objs = self.disk.batched_get_blocking(self.keys)
        disk_seconds = time.perf_counter() - start
        try:
            if any(o is None for o in objs):
                raise RuntimeError(f"batched_get_blocking: {sum(o is None for o in objs)} "
                                   f"of {len(objs)} chunks missing")
            copy_through_staging(objs, dest, self.slots(tokens), h2d, to_objects=False,
                                 stream=self.stream)
            synchronize()
        finally:
            # After the clock: LMCache releases them once the request is served.
            for o in objs:
                if o is not None:
                    o.ref_count_down()
        return {"disk_seconds": disk_seconds}

    def release(self):
        for key in self.keys:
            self.disk.remove(key)
        self.keys = []

    def close(self):
        for backend in self.backends.values():
            backend.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class RawODirect:
    """No LMCache: the fastest plain program a user would write to put
    these chunks on this disk with O_DIRECT, the yardstick for LMCache's
    stores (LMCache opens its slab O_DIRECT, so its stores go to the disk,
    while its posix backend's stores stop in the page cache).  One slab
    file, preallocated, chunk i at offset i * its size; W = STAGING_CHUNKS
    threads, each with a pinned host buffer of the largest chunk and a
    CUDA stream of its own, thread t taking chunks t, t + W, t + 2W...:
    GPU chunk to its buffer, then pwrite, so at most W writes are in
    flight.  Retrieval is the mirror (preadv into the buffer, then to the
    destination).  No fsync: the GDS rows do not fsync either."""

    def __init__(self, job, device, stream):
        import torch

        del stream  # each thread has its own
        self.path = os.path.join(job["scratch"], "raw", "slab.bin")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        self.pool = None
        try:
            os.posix_fallocate(self.fd, 0, job["total_bytes"])
            biggest = chunk_bytes(max(job["tokens"]))
            self.pinned = torch.cuda.is_available()
            self.maps, self.buffers = [], []
            for _ in range(STAGING_CHUNKS):
                if self.pinned:  # cudaHostAlloc: page-aligned
                    buf = torch.empty(biggest, dtype=torch.uint8, pin_memory=True)
                else:  # an anonymous mapping: page-aligned
                    import mmap

                    self.maps.append(mmap.mmap(-1, biggest))
                    buf = torch.frombuffer(self.maps[-1], dtype=torch.uint8)
                # O_DIRECT needs the memory, offsets and sizes block-aligned.
                assert buf.data_ptr() % 4096 == 0, hex(buf.data_ptr())
                self.buffers.append(buf)
            self.views = [memoryview(b.numpy()) for b in self.buffers]
            self.streams = [torch.cuda.Stream(device=device) if str(device).startswith("cuda")
                            else None for _ in range(STAGING_CHUNKS)]
            self.pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=STAGING_CHUNKS, thread_name_prefix="odirect")
            # For the worker's poisoning only: this row has no GPU staging.
            self.staging = torch.empty(1, dtype=torch.uint8, device=device)
        except BaseException:
            self.close()
            raise

    def _each_thread(self, part, *args):
        futures = [self.pool.submit(part, t, *args) for t in range(STAGING_CHUNKS)]
        for f in futures:
            f.result()

    def _store_part(self, t, size, count, source):
        buf, view, stream = self.buffers[t][:size], self.views[t][:size], self.streams[t]
        with stream_context(stream):
            for i in range(t, count, STAGING_CHUNKS):
                buf.copy_(source[i * size:(i + 1) * size], non_blocking=stream is not None)
                if stream is not None:
                    stream.synchronize()
                done = 0  # no fsync after: the GDS rows' stores do not fsync either
                while done < size:
                    n = os.pwrite(self.fd, view[done:], i * size + done)
                    if n <= 0:
                        raise OSError(f"pwrite of chunk {i} wrote {n} bytes at {done}")
                    done += n

    def _retrieve_part(self, t, size, count, dest):
        buf, view, stream = self.buffers[t][:size], self.views[t][:size], self.streams[t]
        with stream_context(stream):
            for i in range(t, count, STAGING_CHUNKS):
                done = 0
                while done < size:
                    n = os.preadv(self.fd, [view[done:]], i * size + done)
                    if n <= 0:
                        raise OSError(f"preadv of chunk {i} read {n} bytes at {done}")
                    done += n
                dest[i * size:(i + 1) * size].copy_(buf, non_blocking=stream is not None)
                if stream is not None:
                    stream.synchronize()  # before the buffer takes the next chunk

    def store(self, tokens, count, source, d2h):
        del d2h  # no LMCache
        self._each_thread(self._store_part, chunk_bytes(tokens), count, source)

    def slots(self, tokens):
        size = chunk_bytes(tokens)
        return [b[:size] for b in self.buffers]

    def files(self):
        return [self.path]

    def stored(self, i, size):
        """Chunk @i in the slab, read by the host without O_DIRECT
        (diagnosis only)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, size, i * size)
        finally:
            os.close(fd)

    def retrieve(self, tokens, dest, h2d):
        del h2d  # no LMCache
        size = chunk_bytes(tokens)
        self._each_thread(self._retrieve_part, size, dest.numel() // size, dest)
        synchronize()
        return {}

    def release(self):
        """Nothing: the next size's chunks overwrite these."""

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def stream_context(stream):
    import torch

    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def synchronize():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def copy_through_staging(objs, flat, slots, move, *, to_objects, stream):
    """Moves chunk i between objs[i] and flat's i-th chunk through the
    staging slots, STAGING_CHUNKS at a time, all on @stream: a store
    gathers into the slots and moves them out (@move = d2h); a retrieval
    moves into the slots (@move = h2d) and scatters them to their place."""
    size = slots[0].numel()
    with stream_context(stream):
        for first in range(0, len(objs), len(slots)):
            batch = objs[first:first + len(slots)]
            for i, obj in enumerate(batch):
                part = flat[(first + i) * size:(first + i + 1) * size]
                if to_objects:
                    slots[i].copy_(part)
                    move(slots[i], obj)
                else:
                    move(obj, slots[i])
            if not to_objects:
                for i in range(len(batch)):
                    flat[(first + i) * size:(first + i + 1) * size].copy_(slots[i])


def diagnose(dest, source, size, side, rep) -> dict:
    """Where a retrieval differs from the stored bytes: which chunks, the
    first bad chunk's bad range, whether that range holds the poison
    (nothing arrived) or another chunk's bytes (a staging slot reused too
    early), and whether the stored copy itself is right (store or
    retrieval at fault)."""
    import torch

    count = dest.numel() // size
    bad = (dest != source).view(count, size).sum(dim=1)
    chunks = [(i, int(n)) for i, n in enumerate(bad.tolist()) if n]
    i = chunks[0][0]
    d, want = dest[i * size:(i + 1) * size], source[i * size:(i + 1) * size]
    where = torch.nonzero(d != want).flatten()
    lo, hi = int(where[0]), int(where[-1]) + 1
    got = d[lo:hi]
    rec = {"rep": rep, "bytes": int(bad.sum()), "chunks": chunks[:16],
           "bad_chunks": len(chunks), "first_chunk": i, "range": [lo, hi],
           "poison_dest": bool((got == 0xA5).all()), "poison_staging": bool((got == 0x5A).all())}
    for j in (i - STAGING_CHUNKS, i + STAGING_CHUNKS, i - 1, i + 1):
        if 0 <= j < count and torch.equal(got, source[j * size + lo:j * size + hi]):
            rec["holds_chunk"] = j
            break
    try:
        stored = side.stored(i, size)
        rec["stored_right"] = stored == want.cpu().numpy().tobytes()
    except Exception as exc:  # noqa: BLE001
        rec["stored_right"] = f"error: {exc!r}"[:200]
    return rec


def evict(files, drop_caches: bool) -> float | None:
    """drop_caches is off unless asked for: it would also drop the Python
    and CUDA libraries every later worker loads, and mincore already says
    that none of these files' pages are left."""
    return pagecache.evict_until_cold(files, drop_caches=drop_caches)


class Watchdog(threading.Thread):
    """Ends a worker that has not finished within @seconds with a record
    of where it was: its stage, every thread's Python stack (faulthandler)
    and every task's name, kernel wait channel and state.  A thread of its
    own can: ctypes lets go of the GIL in the call that hangs."""

    def __init__(self, seconds, emit, base, where):
        super().__init__(daemon=True)
        self.seconds, self.emit, self.base, self.where = seconds, emit, base, where

    def run(self):
        time.sleep(self.seconds)
        import faulthandler
        import tempfile

        with tempfile.TemporaryFile("w+") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.seek(0)
            stacks = f.read()
        tasks = {}  # "name wait-channel state": how many threads
        for task in glob.glob("/proc/self/task/*"):
            try:
                name, wchan, stat = (pathlib.Path(task, f).read_text()
                                     for f in ("comm", "wchan", "stat"))
            except OSError:
                continue
            key = f"{name.strip()} {wchan.strip() or '-'} {stat.rsplit(')', 1)[1].split()[0]}"
            tasks[key] = tasks.get(key, 0) + 1
        self.emit({**self.base, **self.where, "status": "timeout",
                   "error": f"not done within {self.seconds:.0f} s ({self.where.get('stage')})",
                   "stacks": stacks[-8000:], "tasks": tasks})
        os._exit(3)


def worker(job) -> int:
    emit = stdout_emitter()
    import torch

    device = job["device"]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.init()
        torch.empty(1, device=device)  # CUDA up before any clock
        torch.cuda.synchronize()
    os.makedirs(job["scratch"], exist_ok=True)
    base = {"kind": "retrieve", "config": job["config"], "cache": job["cache"],
            "round": job["round"]}
    side = None
    # Where the worker is, for the watchdog: a call that never returns
    # (one phxFileReadAsync did) becomes a record with the stacks, before
    # the parent's timeout would drop everything.
    where = {"stage": "import"}
    Watchdog(job["timeout_s"], emit, base, where).start()
    try:
        if job["config"] == "odirect-raw":  # no LMCache: none of its calls
            dispatch, h2d, d2h = "none (no LMCache)", None, None
        else:
            dispatch, h2d, d2h = lmcache_copies()
        stream = torch.cuda.Stream(device=device) if cuda else None
        where["stage"] = "setup"
        start = time.perf_counter()
        side = {"posix": Posix, "odirect-raw": RawODirect}.get(job["config"], Gds)(
            job, device, stream)
        setup_seconds = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001  (a config that cannot start is a record)
        for tokens in job["tokens"]:
            emit({**base, "tokens": tokens, "status": "error", "stage": where["stage"],
                  "error": repr(exc)[:800], "io_library": io_library(job["config"]),
                  "libcufile": loaded("libcufile"),
                  "libphxfile": loaded("libphxfile")})
        _close(side, emit, base)
        return 0
    gen = torch.Generator(device=device).manual_seed(39 + job["round"])
    for tokens in job["tokens"]:
        where.update(tokens=tokens, rep=None)
        size = chunk_bytes(tokens)
        count = job["total_bytes"] // size
        nbytes = count * size
        rec = {**base, "tokens": tokens, "chunk_bytes": size, "chunks": count, "bytes": nbytes,
               "dispatch": dispatch, "setup_seconds": setup_seconds}
        where["stage"] = "store"
        try:
            source = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device,
                                   generator=gen)
            dest = torch.empty_like(source)
            # Made on the default stream, read on the side's: it must be
            # there before the first gather (without this sync the stores
            # raced the generator and a few MB of every size came back wrong).
            synchronize()
            start = time.perf_counter()
            side.store(tokens, count, source, d2h)
            rec["store_seconds"] = time.perf_counter() - start
            rec["store_gbps"] = nbytes / rec["store_seconds"] / 1e9
            seconds, resident, checks, extra = [], [], [], []
            for rep in range(job["reps"]):
                where["rep"] = rep
                where["stage"] = "evict" if job["cache"] == "cold" else "prime"
                files = side.files()
                if job["cache"] == "cold":
                    resident.append(evict(files, job["drop_caches"]))
                else:
                    pagecache.prime(files)
                    resident.append(pagecache.resident_fraction(files))
                dest.fill_(0xA5)
                side.staging.fill_(0x5A)  # nothing left from the last retrieval
                synchronize()
                where["stage"] = "retrieve"
                start = time.perf_counter()
                extra.append(side.retrieve(tokens, dest, h2d))
                seconds.append(time.perf_counter() - start)
                where["stage"] = "check"
                same = bool(torch.equal(dest, source))
                if not same and "mismatch" not in rec:
                    rec["mismatch"] = diagnose(dest, source, size, side, len(checks))
                checks.append(same)
            # "first": the process's first retrieval of this size, lazy
            # setup included; "steady": the median of the later ones.
            steady = statistics.median(seconds[1:] or seconds)
            verified = all(checks)
            rec.update({"status": "ok" if verified else "failed", "verified": verified,
                        "checks": checks, "seconds": seconds, "steady_seconds": steady,
                        "gbps": nbytes / steady / 1e9, "first_gbps": nbytes / seconds[0] / 1e9,
                        "resident_before": resident,
                        "resident_before_max": max((r or 0) for r in resident)})
            if extra and "disk_seconds" in extra[0]:
                rec["disk_seconds"] = [e["disk_seconds"] for e in extra]
            if job["config"] in ("posix", "odirect-raw"):
                rec["pinned"] = side.pinned
            where["stage"] = "release"
            side.release()
            del source, dest
        except Exception as exc:  # noqa: BLE001  (one size failing is a record)
            rec.update({"status": "error", "stage": where["stage"], "error": repr(exc)[:800]})
        rec["io_library"] = io_library(job["config"])
        rec["libcufile"] = loaded("libcufile")
        rec["libphxfile"] = loaded("libphxfile")
        emit(rec)
    _close(side, emit, base)
    return 0


def _close(side, emit, base):
    """LMCache's teardown (deregistration, slab close, backends' close);
    a failure there is a record of its own."""
    if side is None:
        return
    try:
        side.close()
    except Exception as exc:  # noqa: BLE001
        emit({**base, "kind": "teardown", "status": "error", "error": repr(exc)[:800]})


def find_nvidia_cufile(shim: str) -> str | None:
    """NVIDIA's libcufile.so.0: the loader's cache or the CUDA toolkit's
    (phxrepro's search), else the CUDA wheel's (nvidia-cufile, under
    site-packages/nvidia), never the shim."""
    if path := nvidia_cufile(shim):
        return path
    dirs = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    for d in dict.fromkeys(dirs):
        for pattern in ("nvidia/cu*/lib/libcufile.so.0", "nvidia/cufile/lib/libcufile.so.0"):
            for path in sorted(glob.glob(os.path.join(d, pattern))):
                if os.path.realpath(path) != os.path.realpath(shim):
                    return path
    return None


def config_env(base: dict, config: str, build: pathlib.Path, scratch: pathlib.Path,
               nvidia: str | None) -> dict:
    """@base with the library folder @config loads from first on
    LD_LIBRARY_PATH, and neither Phoenix's folders nor any libcufile
    preloaded otherwise."""
    ours = {str(build / "lib" / "phxfile"), str(build / "lib" / "cufile_shim"),
            str(scratch / "nvidia-cufile")}
    env = dict(base)
    kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
            if p and os.path.abspath(p) not in ours]
    preload = [p for p in env.get("LD_PRELOAD", "").split(":")
               if p and "libcufile" not in os.path.basename(p)]
    first = []  # posix, odirect-raw: no library folder of ours
    if GDS_BACKEND.get(config) == "phx":
        first = [str(build / "lib" / "phxfile")]
        if config in PHX_VARIANTS:
            name, value = PHX_VARIANTS[config]
            env[name] = value
    elif config == "cufile-shim":
        first = [str(build / "lib" / "cufile_shim")]
    elif config == "cufile-nvidia" and nvidia:
        # cufile-python opens "libcufile.so", which the wheel does not
        # ship: a link by that name to NVIDIA's library, and its folder.
        link_dir = scratch / "nvidia-cufile"
        link_dir.mkdir(parents=True, exist_ok=True)
        link = link_dir / "libcufile.so"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.realpath(nvidia))
        first = [str(link_dir), os.path.dirname(os.path.realpath(nvidia))]
    env["LD_LIBRARY_PATH"] = ":".join(first + kept)
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    env.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    return env


def probe_libs() -> dict:
    """In this process's environment: what LMCache's phx backend finds
    (find_library, then the file dlopen maps) and what its cufile backend
    loads (cufile.bindings' libcufile.so)."""
    rec = {"find_library_phxfile": ctypes.util.find_library("phxfile")}
    try:
        ctypes.CDLL(rec["find_library_phxfile"] or "libphxfile.so")
        rec["phxfile_loads"] = loaded("libphxfile")
    except OSError as exc:
        rec["phxfile_loads"] = f"error: {exc}"
    try:
        import cufile.bindings  # noqa: F401

        rec["cufile_loads"] = loaded("libcufile")
    except Exception as exc:  # noqa: BLE001
        rec["cufile_loads"] = f"error: {exc!r}"[:300]
    return rec


def probe_python() -> dict:
    """torch, the GPU and LMCache's modules this benchmark calls."""
    import importlib
    import importlib.metadata

    rec = {}
    try:
        import torch

        rec["torch"] = torch.__version__
        rec["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001
        rec["torch"] = f"error: {exc!r}"[:300]
    for dist in ("lmcache", "cufile-python"):
        try:
            rec[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            rec[dist] = None
    for module in ("lmcache.v1.gpu_connector.gds_context", "lmcache.v1.gpu_connector.gpu_ops",
                   "lmcache.v1.storage_backend.local_disk_backend"):
        try:
            importlib.import_module(module)
            rec[module.rsplit(".", 1)[-1]] = "ok"
        except Exception as exc:  # noqa: BLE001
            rec[module.rsplit(".", 1)[-1]] = f"error: {exc!r}"[:300]
    return rec


def probe(build: pathlib.Path, scratch: pathlib.Path) -> dict:
    """One record: the Python side once, the libraries under each GDS
    row's environment (each in a fresh process)."""
    shim = str(build / "lib" / "cufile_shim" / "libcufile.so.0")
    nvidia = find_nvidia_cufile(shim)
    rec = {"kind": "probe", "nvidia_libcufile": nvidia}

    def child(what, config):
        env = config_env(dict(os.environ), config, build, scratch, nvidia)
        try:
            done = subprocess.run([sys.executable, __file__, "probe-" + what],
                                  env=env, capture_output=True, text=True, timeout=120,
                                  check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            return json.loads(lines[-1]) if lines else {"error": done.stderr[-300:]}
        except subprocess.TimeoutExpired:
            return {"error": "timeout"}

    rec.update(child("python", "posix"))
    for config in ("phx", "cufile-shim", "cufile-nvidia"):
        libs = child("libs", config)
        # Only what the row's backend loads: phx the one, cufile the other.
        drop = ("cufile_loads",) if config == "phx" else ("find_library_phxfile", "phxfile_loads")
        rec[config] = {k: v for k, v in libs.items() if k not in drop}
    return rec


def summarise(records):
    out, medians = [], {}
    for config in dict.fromkeys(r["config"] for r in records if "config" in r):
        rows = [r for r in records if r.get("config") == config and r.get("kind") in
                ("retrieve", "teardown")]
        ok = [r for r in rows if r.get("status") == "ok"]
        # The end of an error says most (a worker's stderr ends in its exception).
        errors = [f"{r.get('stage', r['kind'])}: {str(r.get('error', r.get('status')))[-280:]}"
                  for r in rows if r.get("status") != "ok"]
        out.append({"kind": "verify", "config": config, "records": len(rows), "ok": len(ok),
                    "verified_bytes": sum(r["bytes"] * len(r["seconds"]) for r in ok),
                    "status": "ok" if rows and not errors else "error",
                    "must_work": config in MUST_WORK,
                    "errors": list(dict.fromkeys(errors))[:3]})
    ok = [r for r in records if r.get("kind") == "retrieve" and r.get("status") == "ok"]
    for key in sorted({(r["config"], r["cache"], r["tokens"]) for r in ok}):
        rows = [r for r in ok if (r["config"], r["cache"], r["tokens"]) == key]
        for row, field in (("steady", "gbps"), ("first", "first_gbps")):
            medians[(*key, row)] = statistics.median(r[field] for r in rows)
            out.append({"kind": "summary", "config": key[0], "cache": key[1], "tokens": key[2],
                        "row": row, "gbps": medians[(*key, row)],
                        "store_gbps": statistics.median(r["store_gbps"] for r in rows),
                        "chunk_bytes": rows[0]["chunk_bytes"], "bytes": rows[0]["bytes"],
                        "rounds": len(rows),
                        "resident_before_max": max(r["resident_before_max"] for r in rows)})

    # Stores: each row's median over every ok record of a chunk size
    # (every cache and round stores the same chunks the same way).
    for config, tokens in sorted({(r["config"], r["tokens"]) for r in ok}):
        rows = [r for r in ok if (r["config"], r["tokens"]) == (config, tokens)]
        medians[(config, "store", tokens, "store")] = statistics.median(
            r["store_gbps"] for r in rows)
        out.append({"kind": "store_summary", "config": config, "tokens": tokens,
                    "store_gbps": medians[(config, "store", tokens, "store")],
                    "chunk_bytes": rows[0]["chunk_bytes"], "bytes": rows[0]["bytes"],
                    "rounds": len(rows)})

    def ratio(goal, a, b, at_least):
        if rec := goal_ratio(goal, medians, a, b, at_least):
            out.append(rec)

    for tokens in sorted({k[2] for k in medians}):
        for row in ("steady", "first"):
            for gds in ("phx", "cufile-shim", "cufile-nvidia"):
                ratio(f"warm: LMCache {gds} at least 1.5x its local-disk backend "
                      f"({tokens}-token chunks, {row})", (gds, "warm", tokens, row),
                      ("posix", "warm", tokens, row), 1.5)
                ratio(f"cold: LMCache {gds} at least 1x its local-disk backend "
                      f"({tokens}-token chunks, {row})", (gds, "cold", tokens, row),
                      ("posix", "cold", tokens, row), 1.0)
        for gds in ("phx", "cufile-shim", "cufile-nvidia"):
            ratio(f"stores: LMCache {gds} at least 0.95x a raw O_DIRECT writer "
                  f"({tokens}-token chunks)", (gds, "store", tokens, "store"),
                  ("odirect-raw", "store", tokens, "store"), 0.95)
        for variant in PHX_VARIANTS:
            for cache in ("warm", "cold"):
                for row in ("steady", "first"):
                    a, b = (variant, cache, tokens, row), ("phx", cache, tokens, row)
                    if a in medians and b in medians:
                        out.append({"kind": "compare", "what": f"{variant} over phx",
                                    "cache": cache, "tokens": tokens, "row": row,
                                    "ratio": medians[a] / medians[b]})
    return out


def parse_bytes(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": MiB, "GiB": GiB}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


def run(args) -> int:
    build = pathlib.Path(args.build).resolve()
    scratch = pathlib.Path(args.scratch).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shim = str(build / "lib" / "cufile_shim" / "libcufile.so.0")
    nvidia = find_nvidia_cufile(shim)
    sizes = [chunk_bytes(t) for t in args.tokens]
    if any(args.total_bytes % s or args.total_bytes < s for s in sizes):
        raise SystemExit(f"--total-bytes {args.total_bytes} is not a multiple of every chunk "
                         f"size {sizes}")
    probe_rec = probe(build, scratch)
    print(json.dumps(probe_rec), flush=True)
    manifest = {**manifest_header("phx-lmcache-kv-slab/1", ROOT,
                                  ("torch", "lmcache", "cufile-python", "numpy")),
                "probe": probe_rec, "build": str(build), "configs": args.configs,
                "tokens": args.tokens, "chunk_bytes": sizes, "total_bytes": args.total_bytes,
                "layout": {"layers": LAYERS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                           "dtype": "bfloat16", "object_shape": "KV_2LTD [2, L, T, H*D]"},
                "staging_chunks": STAGING_CHUNKS, "rounds": args.rounds,
                "caches": args.caches, "reps": args.reps,
                "evicted_by": "fsync+posix_fadvise(DONTNEED)" + ("+drop_caches=1"
                                                                 if args.drop_caches else "")}
    out.with_name("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    records = []
    nvidia_worked = False
    deadline = time.monotonic() + args.budget_s
    with open(out, "w", encoding="utf-8") as sink:
        sink.write(json.dumps(probe_rec) + "\n")

        def keep(rec):
            records.append(rec)
            sink.write(json.dumps(rec) + "\n")
            sink.flush()
            print(json.dumps(rec), flush=True)

        for rnd in range(args.rounds):
            for cache in args.caches.split(","):
                for config in rotated(args.configs.split(","), rnd):
                    if time.monotonic() > deadline:
                        break
                    if config == "cufile-nvidia" and rnd > 0 and not nvidia_worked:
                        continue
                    base = {"kind": "retrieve", "config": config, "cache": cache, "round": rnd}
                    if config == "cufile-nvidia" and nvidia is None:
                        keep({**base, "status": "error", "stage": "find",
                              "error": "no NVIDIA libcufile.so.0 found"})
                        continue
                    job = {**base, "tokens": args.tokens, "total_bytes": args.total_bytes,
                           "reps": args.reps, "device": args.device,
                           "timeout_s": max(10.0, args.job_timeout_s - 10),
                           "drop_caches": args.drop_caches,
                           "scratch": str(scratch / f"{config}-{cache}-{rnd}")}
                    del job["kind"]
                    env = config_env(dict(os.environ), config, build, scratch, nvidia)
                    if config == "cufile-nvidia":
                        # NVIDIA's library logs why it fails into ./cufile.log
                        # unless told where: next to the results.
                        env.setdefault("CUFILE_LOGFILE_PATH",
                                       str(out.resolve().with_name("cufile-nvidia.log")))
                    for rec in run_worker(__file__, job, kind="retrieve", env=env,
                                          timeout_s=args.job_timeout_s):
                        keep(rec)
                        if config == "cufile-nvidia" and rec.get("status") == "ok":
                            nvidia_worked = True
                    shutil.rmtree(job["scratch"], ignore_errors=True)
        summary = summarise(records)
        for rec in summary:
            sink.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
    bad = [r for r in summary if r["kind"] == "verify" and r["must_work"] and r["status"] != "ok"]
    verified = {r["config"] for r in summary if r["kind"] == "verify"}
    missing = (MUST_WORK & set(args.configs.split(","))) - verified
    return 1 if bad or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--build", required=True, help="the build folder (lib/phxfile, "
                        "lib/cufile_shim)")
    common.add_argument("--scratch", default=os.path.join(os.environ.get("TMPDIR", "/var/tmp"),
                                                          "phx-lmcache"))
    p = sub.add_parser("probe", parents=[common])
    del p
    r = sub.add_parser("run", parents=[common])
    r.add_argument("--out", required=True)
    r.add_argument("--configs", default=",".join(CONFIGS))
    r.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")], default=TOKENS)
    r.add_argument("--total-bytes", type=parse_bytes, default=TOTAL_BYTES)
    r.add_argument("--reps", type=int, default=3, help="retrievals per chunk size and process")
    r.add_argument("--device", default="cuda:0")
    r.add_argument("--drop-caches", action="store_true",
                   help="cold: also write /proc/sys/vm/drop_caches where writable")
    add_round_arguments(r)
    sub.add_parser("probe-libs")
    sub.add_parser("probe-python")
    w = sub.add_parser("worker")
    w.add_argument("job")
    args = parser.parse_args()
    if args.command == "worker":
        return worker(json.loads(args.job))
    if args.command in ("probe-libs", "probe-python"):
        rec = probe_libs() if args.command == "probe-libs" else probe_python()
        print(json.dumps(rec), flush=True)
        return 0
    if args.command == "probe":
        print(json.dumps(probe(pathlib.Path(args.build).resolve(),
                               pathlib.Path(args.scratch).resolve())), flush=True)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
