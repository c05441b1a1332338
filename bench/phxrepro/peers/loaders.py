# SPDX-License-Identifier: MIT
"""The loaders, by the name --peers gives them.

Each is the call a user makes, from a fresh object: fresh() creates what
the user would create (a loader object, a streamer, file handles and a
buffer) and loads every file of the set onto the device; again() is the
steady state, the same object's next load (or, for one-line calls that
have no object, the same call repeated in the same process).  kind:
"tensor" loaders return {name: tensor} and are compared with safetensors'
load; "raw" reads the files' bytes into GPU memory (no tensors); a
"ceiling" reads the files into host memory with plain threads and no GPU
copy: what the host can deliver.  Imports happen in load_module(), before
the clock starts, and are timed apart.

API references (their documentation, 2026-12): phoenix_gds
(python/phoenix_gds/__init__.py), safetensors.torch.load_file,
fastsafetensors SafeTensorsFileLoader (nogds=True: pread into a bounce
buffer; nogds=False: cuFile), instanttensor.safe_open(...).tensors(),
runai_model_streamer.SafetensorsStreamer (stream_files, get_tensors;
streamed to host memory, then tensor.to(device)), kvikio.CuFile.pread."""

from __future__ import annotations

import concurrent.futures
import importlib
import mmap
import os

CHUNK = 16 << 20
ALIGN = 4096


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class Peer:
    name = ""
    kind = "tensor"
    needs_cuda = True          # cannot run without a CUDA device
    modules: tuple = ()        # imported before timing
    dists: tuple = ()          # distributions whose versions the record names
    steady_how = "same object, next load"

    def __init__(self, files: list[str], device: str, options: dict | None = None):
        self.files, self.device, self.options = files, device, dict(options or {})
        self.mods: dict = {}

    def load_module(self) -> None:
        for m in self.modules:
            self.mods[m] = importlib.import_module(m)

    def setup(self) -> dict:
        """Untimed preparation (the ceilings' buffers); returns record fields."""
        return {}

    def fresh(self):
        raise NotImplementedError

    def again(self):
        return self.fresh()

    def extra(self) -> dict:
        """Fields for the record after a load (engines, modes...)."""
        return {}

    def release(self, result) -> None:
        """Drops a result (and what it holds on the device)."""

    def close(self) -> None:
        pass


# -- tensor loaders ---------------------------------------------------------------------------

class Phoenix(Peer):
    name = "phoenix"
    modules = ("phoenix_gds",)
    dists = ("phoenix-gds",)
    steady_how = "the same call repeated (no object to keep)"
    needs_cuda = False  # device="cpu": the host engine

    def fresh(self):
        return self.mods["phoenix_gds"].load_safetensors(
            self.files, device=self.device, framework=self.options.get("framework", "torch"))

    def extra(self) -> dict:
        # The one-line call keeps no stats: it takes the engine auto picks
        # for the device, which engine_for names (keyed as Loader.stats is).
        index = self.device.partition(":")[2] or "0"
        return {"engines": {index: self.mods["phoenix_gds"].engine_for(self.device)}}


class PhoenixLoader(Peer):
    name = "phoenix-loader"
    modules = ("phoenix_gds",)
    dists = ("phoenix-gds",)

    needs_cuda = False

    def fresh(self):
        # options["loader"]: Loader keywords (a forced cold shape); none: its defaults.
        self.loader = self.mods["phoenix_gds"].Loader(self.device,
                                                      **self.options.get("loader", {}))
        return self.again()

    def again(self):
        return self.loader.load(self.files, framework=self.options.get("framework", "torch"))

    def extra(self) -> dict:
        stats = self.loader.stats
        return {"engines": {str(k): v for k, v in dict(stats.get("engines", {})).items()},
                "library_seconds": stats.get("seconds"),
                "allocate_seconds": stats.get("allocate_seconds"),
                # The shape each file was read in, and why (cold: the rule's inputs).
                "per_file": [{k: f.get(k) for k in ("path", "mode", "path_taken", "threads",
                                                    "request_bytes", "depth", "resident", "why")}
                             for f in stats.get("per_file", [])]}


class Safetensors(Peer):
    name = "safetensors"
    modules = ("safetensors.torch",)
    dists = ("safetensors",)
    steady_how = "the same call repeated (no object to keep)"
    needs_cuda = False  # device="cpu" works (the dry run)

    def load_module(self) -> None:
        # The CPU dry run on a machine without torch: numpy arrays.
        self.modules = ("safetensors.numpy",) if self.options.get("framework") == "numpy" \
            else ("safetensors.torch",)
        super().load_module()

    def fresh(self):
        load_file = self.mods[self.modules[0]].load_file
        out = {}
        for f in self.files:
            out.update(load_file(f) if self.modules[0] == "safetensors.numpy"
                       else load_file(f, device=self.device))
        return out


class CorruptSelfTest(Safetensors):
    """safetensors' load with one bit flipped: the harness must call it
    unverified (tests and a sanity row; never in the default set)."""
    name = "selftest-corrupt"

    def fresh(self):
        out = super().fresh()
        first = sorted(out)[0]
        t = out[first]
        if self.modules[0] == "safetensors.numpy":
            t = out[first] = t.copy()
            t.reshape(-1).view("uint8")[0] ^= 1
        else:
            t.reshape(-1).view(__import__("torch").uint8)[0] ^= 1
        return out


class FastSafetensors(Peer):
    name = "fastsafetensors"
    modules = ("fastsafetensors",)
    dists = ("fastsafetensors",)
    needs_cuda = False
    nogds = True

    def fresh(self):
        fst = self.mods["fastsafetensors"]
        self.loader = fst.SafeTensorsFileLoader(None, self.device, nogds=self.nogds)
        self.loader.add_filenames({0: list(self.files)})
        return self.again()

    def again(self):
        buffers = self.loader.copy_files_to_device()
        return _Held({name: buffers.get_tensor(name) for name in self.loader.get_keys()},
                     buffers)

    def release(self, result) -> None:
        if isinstance(result, _Held):
            result.owner.close()

    def close(self) -> None:
        if getattr(self, "loader", None) is not None:
            self.loader.close()

    def extra(self) -> dict:
        return {"nogds": self.nogds}


class FastSafetensorsGDS(FastSafetensors):
    name = "fastsafetensors-gds"
    nogds = False
    needs_cuda = True


class InstantTensor(Peer):
    name = "instanttensor"
    modules = ("instanttensor",)
    dists = ("instanttensor",)
    steady_how = "the same call repeated (safe_open is a context per load)"
    backend = None  # its default: O_DIRECT for regular files

    def fresh(self):
        it = self.mods["instanttensor"]
        index = int(self.device.split(":")[1]) if ":" in self.device else 0
        kwargs = {}
        if self.backend == "buffered":
            kwargs["backend"] = it.BackendPolicy.BUFFERED
        out = {}
        with it.safe_open(list(self.files), framework="pt", device=index, **kwargs) as f:
            for name, tensor in f.tensors():
                out[name] = tensor
        return out

    def extra(self) -> dict:
        return {"backend": self.backend or "default"}


class InstantTensorBuffered(InstantTensor):
    name = "instanttensor-buffered"
    backend = "buffered"


class RunAI(Peer):
    name = "runai"
    modules = ("runai_model_streamer",)
    dists = ("runai-model-streamer",)
    needs_cuda = False

    def fresh(self):
        self.streamer = self.mods["runai_model_streamer"].SafetensorsStreamer()
        self.streamer.__enter__()
        return self.again()

    def again(self):
        self.streamer.stream_files(list(self.files))
        if self.device == "cpu":
            return dict(self.streamer.get_tensors())
        return {name: t.to(self.device) for name, t in self.streamer.get_tensors()}

    def close(self) -> None:
        if getattr(self, "streamer", None) is not None:
            self.streamer.__exit__(None, None, None)

    def extra(self) -> dict:
        return {"path": "streamed to host memory, then tensor.to(device)"}


class _Held(dict):
    """A {name: tensor} whose memory belongs to @owner until released."""

    def __init__(self, tensors: dict, owner):
        super().__init__(tensors)
        self.owner = owner


# -- raw reads and ceilings -------------------------------------------------------------------

class Raw:
    """A load that is bytes, not tensors: read(i, offset, n) gives file i's."""

    def __init__(self, read):
        self.read = read


class Kvikio(Peer):
    name = "kvikio"
    kind = "raw"
    modules = ("kvikio", "torch")
    dists = ("kvikio-cu13", "libkvikio-cu13")

    def fresh(self):
        torch, kvikio = self.mods["torch"], self.mods["kvikio"]
        self.handles = [kvikio.CuFile(p, "r") for p in self.files]
        self.buffers = [torch.empty(os.path.getsize(p), dtype=torch.uint8, device=self.device)
                        for p in self.files]
        return self.again()

    def again(self):
        futures = [f.pread(b) for f, b in zip(self.handles, self.buffers)]
        for fut, b in zip(futures, self.buffers):
            n = fut.get()
            if n != b.numel():
                raise OSError(f"kvikio read {n} of {b.numel()} bytes")
        return Raw(lambda i, off, n: self.buffers[i][off:off + n].cpu().numpy().tobytes())

    def extra(self) -> dict:
        kvikio = self.mods["kvikio"]
        try:
            mode = kvikio.defaults.get("compat_mode")
        except (AttributeError, TypeError, KeyError):
            mode = kvikio.defaults.compat_mode()
        return {"compat_mode": str(mode)}

    def close(self) -> None:
        for f in getattr(self, "handles", []):
            f.close()


class PinnedRead(Peer):
    """THREADS threads pread CHUNK-sized pieces into one host buffer."""
    name = "pinned_read"
    kind = "ceiling"
    needs_cuda = False
    steady_how = "the same buffer, read again"
    direct = False

    def setup(self) -> dict:
        self.threads = int(self.options.get("threads", 16))
        sizes = [os.path.getsize(p) for p in self.files]
        self.starts, at = [], 0
        for s in sizes:
            self.starts.append(at)
            at += -(-s // CHUNK) * CHUNK
        memory, self.keep, kind = _host_buffer(at, pinned=not self.direct and self.device != "cpu")
        self.view = memoryview(memory).cast("B")
        return {"host_memory": kind, "threads": self.threads, "chunk": CHUNK,
                "o_direct": self.direct}

    def fresh(self):
        flags = os.O_RDONLY | (os.O_DIRECT if self.direct else 0)
        jobs = []
        fds = [os.open(p, flags) for p in self.files]
        try:
            for i, p in enumerate(self.files):
                size = os.path.getsize(p)
                jobs += [(fds[i], off, min(CHUNK, size - off), self.starts[i] + off)
                         for off in range(0, size, CHUNK)]

            def one(job):
                fd, off, size, dst = job
                # O_DIRECT wants whole blocks: the last piece asks for its padding too.
                want = -(-size // ALIGN) * ALIGN if self.direct else size
                done = 0
                while done < size:
                    n = os.preadv(fd, [self.view[dst + done:dst + want]], off + done)
                    if n <= 0:
                        raise OSError(f"short read at {off + done}")
                    done += n
                return size

            with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
                total = sum(pool.map(one, jobs))
        finally:
            for fd in fds:
                os.close(fd)
        del total
        return Raw(lambda i, off, n: self.view[self.starts[i] + off:self.starts[i] + off + n])

    def close(self) -> None:
        self.view.release()


class ODirectRead(PinnedRead):
    name = "odirect_read"
    direct = True


def _host_buffer(size: int, pinned: bool):
    """A page-aligned host buffer, touched once (no page faults timed):
    pinned through torch when asked and CUDA is there, else an anonymous
    mapping.  Returns (buffer, owner, what it is)."""
    if pinned:
        try:
            import torch

            if torch.cuda.is_available():
                t = torch.empty(size, dtype=torch.uint8, pin_memory=True)
                t.fill_(0)
                return t.numpy(), t, "pinned (torch pin_memory)"
        except ImportError:
            pass
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(m)
    for off in range(0, size, mmap.PAGESIZE):
        view[off] = 0
    view.release()
    return m, m, "anonymous mmap, pageable" + (" (no CUDA to pin with)" if pinned else "")


LOADERS = {cls.name: cls for cls in (
    Phoenix, PhoenixLoader, Safetensors, FastSafetensors, FastSafetensorsGDS, InstantTensor,
    InstantTensorBuffered, RunAI, Kvikio, PinnedRead, ODirectRead, CorruptSelfTest)}

# What --peers means when not given (selftest-corrupt only on request).
DEFAULT = ["phoenix", "phoenix-loader", "safetensors", "fastsafetensors", "fastsafetensors-gds",
           "instanttensor", "instanttensor-buffered", "runai", "kvikio", "pinned_read",
           "odirect_read"]
ALIASES = {"runai-model-streamer": "runai", "kvikio-cu13": "kvikio"}


def parse(names: str | list[str] | None) -> list[str]:
    """--peers LIST -> loader names; a name that is a family (phoenix,
    fastsafetensors, instanttensor) also brings its variants."""
    if not names:
        return list(DEFAULT)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out = []
    for n in names:
        n = ALIASES.get(n, n)
        if n not in LOADERS:
            raise ValueError(f"unknown peer {n!r} (known: {', '.join(LOADERS)})")
        family = [m for m in DEFAULT if m == n or m.startswith(n + "-")]
        for m in family or [n]:
            if m not in out:
                out.append(m)
    return out
