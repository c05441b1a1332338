# SPDX-License-Identifier: MIT
"""Type stubs of the phoenix_gds._phoenix extension (pybind11)."""

from os import PathLike
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from typing_extensions import Self

__version__: str

_Path = Union[str, PathLike]
_DeviceName = Union[str, int, Any]  # "cpu", "cuda", "cuda:N", a CUDA ordinal, a torch.device

class ArgumentError(OSError, ValueError):
    """A bad argument value: both ValueError and OSError with errno EINVAL."""

class _HostBytes:
    """A CPU tensor's bytes through the buffer protocol (writable)."""
_Request = Sequence[Any]  # (buf, size=None, file_offset=0, buf_offset=0)

class Tensor:
    """A loaded tensor; hand it to torch/cupy/jax/numpy.from_dlpack."""
    @property
    def name(self) -> str:
        """The tensor's name in the checkpoint."""
    @property
    def dtype(self) -> str:
        """The safetensors dtype ("F32", "BF16"...)."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape."""
    @property
    def nbytes(self) -> int:
        """Bytes of data."""
    @property
    def data_ptr(self) -> int:
        """Address of the data."""
    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A DLPack capsule that keeps the memory alive."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(DLPack device type, device id)."""
    def as_bytes(self) -> Tensor:
        """The same memory as a flat U8 tensor (for dtypes a framework lacks)."""
    def _host_bytes(self) -> _HostBytes:
        """The bytes of a CPU tensor, writable, through the buffer protocol."""
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any:
        """A writable numpy view of a CPU tensor (TypeError on a GPU)."""

class Loader:
    """The extension's loader; use phoenix_gds.Loader."""
    def __init__(self, device: _DeviceName = "cuda:0", engine: str = "auto",
                 device_map: Optional[Mapping[str, _DeviceName]] = None, cache: str = "auto",
                 chunk_size: int = ..., queue_depth: int = 8, parallel_files: int = 4,
                 pinned: bool = False, cold_reader: str = "auto",
                 cold_request: Optional[int] = None,
                 cold_in_flight: Optional[int] = None) -> None: ...
    def warm_up(self, paths: Any) -> None:
        """Opens the devices and moves one small read through each."""
    def load(self, paths: Any, progress: Optional[Callable[[int, int], None]] = None,
             keys: Optional[Iterable[str]] = None) -> Dict[str, Tensor]:
        """{name: Tensor} for every tensor of the paths (or those keys names)."""
    @property
    def stats(self) -> Dict[str, Any]:
        """The last load's statistics."""

class Registration:
    """A buffer registered on a Device once, for many reads and writes.

    Any I/O whose buffer lies inside it uses it.  Keeps the buffer object
    alive until close(); a context manager."""
    def close(self) -> None:
        """Deregisters (once the I/O using it ends) and drops the buffer. Idempotent."""
    @property
    def closed(self) -> bool:
        """True after close()."""
    @property
    def ptr(self) -> int:
        """Address of the registered memory (ValueError when closed)."""
    @property
    def nbytes(self) -> int:
        """Bytes registered (ValueError when closed)."""
    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
    @property
    def buffer(self) -> Any:
        """The registered object (ValueError when closed)."""
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...

class Options:
    """A device's tunables (phx::Options; docs/configuration.md).

    Options(**fields) starts from the process defaults (the PHX_* environment,
    read once) and changes the fields named.  OSError(EINVAL) names a field
    out of range."""
    engine: str
    queue_depth: int
    staging_bytes: int
    copy_threads: int
    copy_depth: int
    copy_chunk: int
    copy_direct_chunk: int
    stream_workers: int
    stream_staging_bytes: int
    stream_lanes: int
    read_cache: str
    copy_spin_us: int
    def __init__(self, **fields: Any) -> None: ...
    @staticmethod
    def defaults() -> Options:
        """The process defaults (the environment as first read, or as set_defaults set them)."""
    @staticmethod
    def from_environment() -> Options:
        """The built-in defaults with the environment applied, read now."""
    @staticmethod
    def set_defaults(options: Options) -> None:
        """Makes options the process defaults, for the engines set up from now on."""
    def validate(self) -> None:
        """Raises ArgumentError (ValueError, OSError EINVAL) naming the first field out of range."""
    def __eq__(self, other: object) -> bool: ...

class Device:
    """A device opened with an engine, for registering buffers.

    Device("cpu"): host memory, host engine.  Device("cuda:N", engine):
    engine "auto", "direct", "compat" or "cufile".  options: the engine's
    tunables, fixed by the first Device of a GPU and engine in a process."""
    def __init__(self, device: _DeviceName = "cpu", engine: str = "auto", *,
                 options: Optional[Options] = None) -> None: ...
    def register(self, buf: Any) -> Registration:
        """Registers buf (DLPack, CUDA array interface or buffer protocol) once for many I/Os."""
    def close(self) -> None:
        """Closes the registrations made here. Idempotent."""
    @property
    def closed(self) -> bool:
        """True after close()."""
    @property
    def id(self) -> int:
        """Phoenix device id."""
    @property
    def engine(self) -> str:
        """"direct", "compat", "host" or "cufile"."""
    @property
    def engine_reason(self) -> str:
        """Why that engine."""
    @property
    def options(self) -> Options:
        """The Options the engine behind this Device was opened with."""
    @property
    def name(self) -> str:
        """"cpu" or "cuda:N" as given."""
    @property
    def stats(self) -> Dict[str, int]:
        """{"live": registrations now, "registered": pin-and-map calls so far}."""
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...

class File:
    """A file opened for Phoenix I/O (see phoenix_gds.File)."""
    def __init__(self, path: _Path, mode: str = "r", *, direct: Union[str, bool] = "auto",
                 engine: str = "auto") -> None: ...
    def pread(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
              buf_offset: int = 0) -> int:
        """Reads into buf; returns the bytes read (short only at end of file)."""
    def pwrite(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
               buf_offset: int = 0) -> int:
        """Writes from buf; returns the bytes written."""
    def pread_batch(self, requests: Iterable[_Request]) -> List[int]:
        """Reads many (buf, size, file_offset, buf_offset) at once."""
    def pwrite_batch(self, requests: Iterable[_Request]) -> List[int]:
        """Writes many (buf, size, file_offset, buf_offset) at once."""
    def read_ranges(self, buf: Any, pieces: Iterable[Tuple[int, int, int]]) -> int:
        """Reads many (file_offset, buf_offset, size) pieces into buf at once; returns the bytes."""
    def read_into(self, tensor: Any, file_offset: int = 0, size: Optional[int] = None,
                  engine: str = "auto") -> int:
        """pread(tensor, size, file_offset) with this call's engine."""
    def close(self) -> None:
        """Closes the file (after I/O in flight). Idempotent."""
    @property
    def closed(self) -> bool:
        """True after close()."""
    @property
    def size(self) -> int:
        """The file's size in bytes."""
    @property
    def fd(self) -> int:
        """The file descriptor."""
    @property
    def direct_io(self) -> bool:
        """True when opened O_DIRECT."""
    def reads_buffered(self, file_offset: int, size: int) -> bool:
        """Whether a read of the range would go through the page cache now."""
    @property
    def path(self) -> str:
        """The path as opened."""
    @property
    def mode(self) -> str:
        """The mode as given."""
    @property
    def writable(self) -> bool:
        """True unless mode is "r"."""
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...

def _buffer_nbytes(buf: Any, writable: bool = False) -> int:
    """The bytes of memory buf describes."""

def engine_for(device: _DeviceName = "cuda:0") -> str:
    """The engine auto picks for a device."""

def read_header(path: _Path) -> Dict[str, Any]:
    """A .safetensors file's header, validated: {"path", "file_size", "data_offset",
    "metadata", "tensors": {name: (dtype, shape, file begin, file end)}}."""

def parse_header(data: Any, name: str = "<bytes>") -> Dict[str, Any]:
    """read_header of a whole file held in memory (bytes), named name in errors."""

def dtypes() -> List[Tuple[str, int]]:
    """[(safetensors dtype, bits per element)], in safetensors' order (ascending alignment)."""

def checkpoint_files(path: _Path) -> List[str]:
    """The .safetensors files a file, folder or index stands for."""

def release_idle_engines() -> int:
    """Stops the engines kept set up after their devices closed; returns how many."""
