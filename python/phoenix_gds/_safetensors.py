# SPDX-License-Identifier: MIT
"""safetensors' face: ``safe_open`` with keys, metadata, whole tensors and
slices, each read straight into its destination on the target device.

The header is read and validated by libphoenix (the same checks as the
loader).  A slice reads only its own bytes: one piece per run of contiguous
elements (a row shard is one piece, a column shard one piece per row),
all handed to File.read_ranges, which merges neighbours and issues them
together into the destination tensor.

Storage moves whole 4 KiB pages.  When a slice's pieces are evenly spaced
and their pages cover at least half of the range they span (a column half
of a [4096, 4096] BF16 weight touches every page: 4 KiB pieces at
unaligned offsets), reading each piece costs more than reading the span:
small reads run well under half the rate of one sequential read, on disks
and out of the page cache alike.  Such a slice reads its span once into a
staging buffer on the target device and copies the pieces out of it there.
Sparser slices read their pieces; into a GPU without the direct engine,
they go through pinned host memory and one copy, not one copy per piece.

Which descriptor reads: the ranges that the page cache holds, and small
pieces (under 1 MiB on average: an unaligned O_DIRECT piece reads a whole
block at each edge, one after another), go through a buffered descriptor
without readahead (POSIX_FADV_RANDOM, so that a cold sparse slice reads its
own pages, not its neighbours'); large ranges not in the cache go
O_DIRECT.  The direct engine (phxfs) always reads O_DIRECT.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
from typing import (Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Type,
                    Union)

from . import _phoenix
from ._convert import framework_name, numpy_dtype, torch_dtype, torch_shape
from ._phoenix import ArgumentError, engine_for


class SafetensorError(Exception):
    """safetensors' error (an Exception, as ``safetensors.SafetensorError``):
    a bad header or file, a tensor the file lacks, an index the tensor
    cannot take.

    Each one raised here is also the builtin error numpy or the system
    would raise (KeyError for a missing tensor, OSError with errno for a
    bad file, FileNotFoundError..., IndexError, TypeError, ValueError for
    an index), so that code written for safetensors and code written for
    numpy or this package's earlier errors both catch it."""


SafetensorError.__module__ = "phoenix_gds"


@functools.lru_cache(maxsize=None)
def _error_class(builtin: Type[BaseException]) -> type:
    """SafetensorError and ``builtin`` in one class (made once per builtin)."""
    return type(f"Safetensor{builtin.__name__}", (SafetensorError, builtin),
                {"__module__": "phoenix_gds", "__doc__": f"SafetensorError and {builtin.__name__}."})


def _error(builtin: Type[BaseException], *args: Any) -> SafetensorError:
    return _error_class(builtin)(*args)


@contextlib.contextmanager
def _safetensor_errors() -> Iterator[None]:
    """Turns the library's OSError (a bad header is EINVAL or EOVERFLOW, a
    failed system call its errno) into the same OSError subclass and errno
    that is also a SafetensorError.  A bad argument stays ArgumentError."""
    try:
        yield
    except ArgumentError:
        raise
    except OSError as error:
        if isinstance(error, SafetensorError):
            raise
        raise _error(type(error), *error.args) from None


# safetensors dtype -> bits per element, from the library (F4 and F6_* pack
# elements across bytes).
_DTYPE_BITS: Dict[str, int] = dict(_phoenix.dtypes())


def _nbytes(dtype: str, count: int) -> int:
    """Bytes of ``count`` elements (whole: the header reader checked)."""
    return count * _DTYPE_BITS[dtype] // 8


# Average piece size from which uncached pieces go O_DIRECT.
_DIRECT_PIECE = 1 << 20
# Fraction of a read's range in the page cache from which it goes buffered.
_CACHED = 0.5
# Fraction of a span's pages that its pieces touch from which the span is
# read whole (see the module's docstring).
_DENSE = 0.5
_PAGE = 4096


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _normalize(key: Any, shape: Tuple[int, ...], name: str) -> Tuple[List[Tuple[int, int]],
                                                                     List[int]]:
    """A numpy-style index (ints, slices of step 1, one Ellipsis) -> per
    dimension [start, stop) and the result's shape."""
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise ArgumentError(errno.EINVAL, f"tensor {name!r}: an index can have one Ellipsis")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = len(shape) - (len(items) - 1)
        items[at:at + 1] = [slice(None)] * max(fill, 0)
    if len(items) > len(shape):
        raise ArgumentError(errno.EINVAL, f"tensor {name!r} has {len(shape)} dimensions; "
                                          f"the index {key!r} has {len(items)}")
    items += [slice(None)] * (len(shape) - len(items))
    ranges: List[Tuple[int, int]] = []
    out_shape: List[int] = []
    for dim, (item, extent) in enumerate(zip(items, shape)):
        if isinstance(item, slice):
            start, stop, step = item.indices(extent)
            if step != 1:
                raise ArgumentError(errno.EINVAL, f"tensor {name!r}, dimension {dim}: slice step "
                                                  f"{item.step} (only step 1 is read in place)")
            stop = max(stop, start)
            ranges.append((start, stop))
            out_shape.append(stop - start)
            continue
        try:
            index = item.__index__()
        except (AttributeError, TypeError):
            raise TypeError(f"tensor {name!r}, dimension {dim}: index {item!r} is neither an "
                            "integer, a slice nor Ellipsis") from None
        if not -extent <= index < extent:
            raise _error(IndexError, f"tensor {name!r}, dimension {dim}: index {index} is out of "
                                     f"range for size {extent}")
        index %= extent
        ranges.append((index, index + 1))
    return ranges, out_shape


class Layout(NamedTuple):
    """Where a slice's bytes are: ``count`` runs of ``run`` bytes, ``stride``
    apart from file offset ``first`` when ``pieces`` is None (evenly
    spaced), else the explicit (file_offset, buf_offset, size) pieces."""

    first: int
    run: int
    count: int
    stride: int
    pieces: Optional[List[Tuple[int, int, int]]] = None

    def all_pieces(self) -> List[Tuple[int, int, int]]:
        if self.pieces is not None:
            return self.pieces
        return [(self.first + k * self.stride, k * self.run, self.run) for k in range(self.count)]


def slice_layout(shape: Tuple[int, ...], element: int, begin: int,
                 ranges: List[Tuple[int, int]]) -> Layout:
    """The layout of the elements of ``ranges`` of a row-major tensor at
    file offset ``begin``, in the order they land in a contiguous
    destination.  Computed in closed form when the runs are evenly spaced
    (a row or column shard of any size costs no loop over its rows)."""
    if any(stop == start for start, stop in ranges):
        return Layout(begin, 0, 0, 0, [])
    # The innermost dimensions taken whole read as one run with the first
    # dimension (from the inside) that is cut.
    cut = len(shape) - 1
    while cut >= 0 and ranges[cut] == (0, shape[cut]):
        cut -= 1
    if cut < 0:
        size = _prod(shape) * element
        return Layout(begin, size, 1, size)
    strides = [_prod(shape[d + 1:]) * element for d in range(len(shape))]
    run = (ranges[cut][1] - ranges[cut][0]) * strides[cut]
    first = begin + sum(start * stride for (start, _), stride in zip(ranges, strides))
    outer = ranges[:cut]
    count = _prod([stop - start for start, stop in outer])
    # Evenly spaced when, past the first outer dimension that takes more
    # than one index, every outer dimension is taken whole.
    varying = [d for d, (start, stop) in enumerate(outer) if stop - start > 1]
    if not varying or all(outer[d] == (0, shape[d]) for d in range(varying[0] + 1, cut)):
        return Layout(first, run, count, strides[cut - 1] if cut > 0 else run)
    pieces = []
    base = first - sum(start * stride for (start, _), stride in zip(outer, strides))
    for k, index in enumerate(itertools.product(*(range(a, b) for a, b in outer))):
        offset = base + sum(i * s for i, s in zip(index, strides))
        pieces.append((offset, k * run, run))
    return Layout(first, run, count, 0, pieces)


def slice_pieces(shape: Tuple[int, ...], element: int, begin: int,
                 ranges: List[Tuple[int, int]]) -> List[Tuple[int, int, int]]:
    """The (file_offset, buf_offset, size) pieces of ``slice_layout``."""
    return slice_layout(shape, element, begin, ranges).all_pieces()


def _page_density(layout: Layout) -> float:
    """About the fraction of the pages of an evenly spaced layout's span that
    its runs touch: a run of ``run`` bytes at an offset unaligned to the
    page touches (run + page - 1) / page pages on average, once per stride."""
    return min(1.0, (layout.run + _PAGE - 1) / layout.stride)


class _Target:
    """Where tensors go: a framework and a device, with the destination
    allocated there as raw bytes and viewed as the tensor's dtype."""

    def __init__(self, framework: Any, device: Any):
        self.framework = framework_name(framework, allow_none=False)
        if self.framework not in ("torch", "numpy"):
            raise ArgumentError(errno.EINVAL, f"framework {framework!r}: safe_open serves 'pt' "
                                              "(torch) and 'np' (numpy)")
        self.device = _device_text(device)
        if self.framework == "numpy" and self.device != "cpu":
            raise ArgumentError(errno.EINVAL, f"device {device!r}: numpy arrays live on the cpu")
        if self.framework == "torch":
            import torch

            self.torch = torch
            self.torch_device = torch.device(self.device)

    def empty_bytes(self, nbytes: int) -> Any:
        if self.framework == "torch":
            return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.torch_device)
        import numpy

        return numpy.empty(nbytes, dtype=numpy.uint8)

    @property
    def cuda(self) -> bool:
        return self.device != "cpu"

    def synchronize(self) -> None:
        if self.framework == "torch" and self.cuda:
            self.torch.cuda.current_stream(self.torch_device).synchronize()

    def pinned_bytes(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True)

    def copy_strided(self, dst: Any, span: Any, count: int, run: int, stride: int) -> None:
        """dst[k * run:(k + 1) * run] = span[k * stride:k * stride + run] for each k < count."""
        if self.framework == "torch":
            dst.view(count, run).copy_(span.as_strided((count, run), (stride, 1)))
            return
        from numpy.lib.stride_tricks import as_strided

        dst.reshape(count, run)[...] = as_strided(span, (count, run), (stride, 1), writeable=False)

    def check_dtype(self, dtype: str, shape: Sequence[int], name: str) -> None:
        """SafetensorError (and TypeError) where the framework has no such
        dtype (numpy: BF16, the F8s, F4, F6; torch: F6), ValueError for an
        F4 shape torch cannot hold, before anything is read."""
        try:
            if self.framework == "numpy":
                numpy_dtype(dtype, name)
            else:
                torch_dtype(dtype, name)
                torch_shape(dtype, shape, name)
        except (TypeError, ValueError) as error:
            raise _error(type(error), str(error)) from None

    def view(self, raw: Any, dtype: str, shape: Sequence[int], name: str) -> Any:
        if self.framework == "torch":
            return raw.view(torch_dtype(dtype, name)).reshape(torch_shape(dtype, shape, name))
        return raw.view(numpy_dtype(dtype, name)).reshape(tuple(shape))


def _device_text(device: Any) -> str:
    if isinstance(device, bool):
        raise ArgumentError(errno.EINVAL, f"device {device!r}: expected 'cpu', 'cuda', 'cuda:N' "
                                          "or a CUDA ordinal N")
    if isinstance(device, int):
        if device < 0:
            raise ArgumentError(errno.EINVAL, f"device {device}: a CUDA ordinal is 0 or more")
        return f"cuda:{device}"
    text = str(device) if hasattr(device, "type") else device
    if not isinstance(text, str) or not (text in ("cpu", "cuda") or text.startswith("cuda:")):
        raise ArgumentError(errno.EINVAL, f"device {device!r}: expected 'cpu', 'cuda', 'cuda:N' "
                                          "or a CUDA ordinal N")
    return "cuda:0" if text == "cuda" else text


class TensorSlice:
    """One tensor of a safe_open file, to be sliced: ``get_shape()``,
    ``get_dtype()``, and ``[index]`` (integers, slices of step 1,
    Ellipsis), which reads only the bytes the index selects."""

    def __init__(self, owner: "safe_open", name: str):
        self._owner = owner
        self._name = name
        self._dtype, self._shape, self._begin, self._end = owner._entry(name)

    def get_shape(self) -> List[int]:
        """The tensor's shape."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The safetensors dtype ("F32", "BF16"...)."""
        return self._dtype

    def __getitem__(self, key: Any) -> Any:
        ranges, out_shape = _normalize(key, self._shape, self._name)
        if _DTYPE_BITS[self._dtype] % 8:
            raise _error(ValueError, f"tensor {self._name!r}: slices of {self._dtype}, whose "
                                     "elements share bytes, are not read")
        layout = slice_layout(self._shape, _DTYPE_BITS[self._dtype] // 8, self._begin, ranges)
        return self._owner._read(self._name, self._dtype, out_shape, layout)

    def __repr__(self) -> str:
        return f"<phoenix_gds TensorSlice {self._name!r} {self._dtype} {list(self._shape)}>"


class safe_open:  # noqa: N801  (safetensors' name)
    """``safe_open(filename, framework, device="cpu")``, as safetensors':
    ``keys()``, ``metadata()``, ``get_tensor(name)``, ``get_slice(name)``.

    framework: "pt" (or "torch") or "np" (or "numpy").  device: "cpu",
    "cuda", "cuda:N", an integer N or a torch.device.  Each tensor (or
    slice) is read with libphoenix straight into memory allocated on the
    device: the direct engine where phxfs serves the GPU, else the compat
    engine's staged copies, the host engine for the CPU.  A context manager;
    ``close()`` closes the file.  The header is validated before anything is
    read (OSError EINVAL naming the file and the problem).
    """

    def __init__(self, filename: Union[str, os.PathLike], framework: str, device: Any = "cpu"):
        from . import File

        self._target = _Target(framework, device)
        with _safetensor_errors():
            self._header = _phoenix.read_header(os.fspath(filename))
        self._tensors: Dict[str, tuple] = self._header["tensors"]
        # This reader picks the descriptor itself (below), so the O_DIRECT one
        # stays O_DIRECT rather than asking the page cache a second time.
        self._file = File(filename, "r", direct="preferred")
        self._buffered = File(filename, "r", direct="off")
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._buffered.fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._always_direct = (self._target.device != "cpu" and
                               engine_for(self._target.device) == "direct")

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Closes the file. Idempotent."""
        self._file.close()
        self._buffered.close()

    def keys(self) -> List[str]:
        """The tensors' names, sorted."""
        return sorted(self._tensors)

    def offset_keys(self) -> List[str]:
        """The tensors' names in the order of their data in the file."""
        return sorted(self._tensors, key=lambda name: self._tensors[name][2])

    def metadata(self) -> Optional[Dict[str, str]]:
        """The header's ``__metadata__``, or None without one."""
        return dict(self._header["metadata"]) or None

    def get_tensor(self, name: str) -> Any:
        """The whole tensor, on the device."""
        dtype, shape, begin, end = self._entry(name)
        return self._read(name, dtype, list(shape), Layout(begin, end - begin, int(end > begin),
                                                           end - begin))

    def get_slice(self, name: str) -> TensorSlice:
        """The tensor, to be sliced: ``f.get_slice("w")[:, 0:512]`` reads only those columns."""
        return TensorSlice(self, name)

    def _entry(self, name: str) -> tuple:
        entry = self._tensors.get(name)
        if entry is None:
            raise _error(KeyError, f"{self._header['path']}: no tensor {name!r}")
        return entry

    def _read(self, name: str, dtype: str, shape: List[int], layout: Layout) -> Any:
        self._target.check_dtype(dtype, shape, name)
        nbytes = _nbytes(dtype, _prod(shape))
        raw = self._target.empty_bytes(nbytes)
        if layout.count == 0:
            return self._target.view(raw, dtype, shape, name)
        # Memory fresh from a framework's caching allocator may still be in
        # use by work queued on its stream; the engine writes on its own.
        self._target.synchronize()
        if layout.count == 1:
            read = self._file_for(layout.first, layout.run, layout.run).pread(
                raw, layout.run, layout.first)
        elif layout.pieces is None and _page_density(layout) >= _DENSE:
            read = self._read_span(raw, layout)
        else:
            read = self._read_pieces(raw, layout.all_pieces())
        if read != nbytes:
            raise _error(OSError, errno.EIO, f"{self._header['path']}: tensor {name!r}: read "
                                             f"{read} of {nbytes} bytes")
        return self._target.view(raw, dtype, shape, name)

    def _read_span(self, raw: Any, layout: Layout) -> int:
        length = (layout.count - 1) * layout.stride + layout.run
        span = self._target.empty_bytes(length)
        read = self._file_for(layout.first, length, length).pread(span, length, layout.first)
        if read != length:
            return read
        self._target.copy_strided(raw, span, layout.count, layout.run, layout.stride)
        # The copy runs on the framework's stream: done before span's
        # memory can go back to its allocator and be written by the engine.
        self._target.synchronize()
        return layout.count * layout.run

    def _read_pieces(self, raw: Any, pieces: List[Tuple[int, int, int]]) -> int:
        first = pieces[0][0]
        end = max(offset + size for offset, _, size in pieces)
        total = sum(size for _, _, size in pieces)
        file = self._file_for(first, end - first, total / len(pieces))
        if not self._target.cuda or self._always_direct:
            return file.read_ranges(raw, pieces)
        # Into a GPU through the copy engine: gather on the host, copy once.
        staging = self._target.pinned_bytes(total)
        read = file.read_ranges(staging, pieces)
        raw.copy_(staging)
        return read

    def _file_for(self, offset: int, length: int, piece: float) -> Any:
        """The descriptor for reads of about ``piece`` bytes each within [offset, +length)."""
        if self._always_direct or not self._file.direct_io:
            return self._file
        if piece < _DIRECT_PIECE or self._file.cached_fraction(offset, length) >= _CACHED:
            return self._buffered
        return self._file

    def __repr__(self) -> str:
        return f"<phoenix_gds.safe_open {self._header['path']!r}>"


__all__ = ["Layout", "SafetensorError", "safe_open", "slice_layout", "slice_pieces", "TensorSlice"]
