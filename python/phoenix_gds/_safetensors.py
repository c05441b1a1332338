# SPDX-License-Identifier: MIT
"""safetensors' face: ``safe_open`` with keys, metadata, whole tensors and
slices, each read straight into its destination on the target device.

The header is read and validated by libphoenix (the same checks as the
loader).  A slice (any basic numpy index: steps, negative ones read
forwards and flipped after, None, Ellipsis) reads only its own bytes: its
elements are runs of contiguous bytes on a few evenly spaced levels (a row
shard is one run, a column shard one level of rows, a step a level of its
own), and sparse levels are read one piece per run, all handed to
File.read_ranges, which merges neighbours and issues them together into
the destination tensor.

Storage moves whole 4 KiB pages.  When a level's pieces cover at least
half of the pages of the range they span (a column half of a [4096, 4096]
BF16 weight touches every page: 4 KiB pieces at unaligned offsets; so do
every 8th column's elements), reading each piece costs more than reading
the span: small reads run well under half the rate of one sequential
read, on disks and out of the page cache alike.  Such a level reads its
span once (once per piece of the sparse levels outside it: every 8th
row's span of every 8th column) into a staging buffer on the target
device and copies the runs out of it there.
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
    doc = f"SafetensorError and {builtin.__name__}."
    return type(f"Safetensor{builtin.__name__}", (SafetensorError, builtin),
                {"__module__": "phoenix_gds", "__doc__": doc})


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


class _Index(NamedTuple):
    """A basic numpy index resolved against a shape."""

    dims: List[Tuple[int, int, int]]  # per dimension of the tensor: (first, count, step >= 1)
    read_shape: List[int]             # the elements read, in file order (ints dropped)
    flips: List[int]                  # axes of read_shape that numpy walks backwards
    shape: List[int]                  # the result: read_shape with the None axes


def _normalize(key: Any, shape: Tuple[int, ...], name: str) -> _Index:
    """numpy's basic indexing (ints, slices of any step, one Ellipsis, None)
    resolved for ``shape``.  A negative step is read forwards and flipped
    after, so a dimension is always read from its lowest index up."""
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise _error(IndexError, f"tensor {name!r}: an index can only have a single ellipsis")
    indexed = sum(1 for k in items if k is not None and k is not Ellipsis)
    if indexed > len(shape):
        raise _error(IndexError, f"too many indices for tensor {name!r}: it has {len(shape)} "
                                 f"dimensions; the index {key!r} has {indexed}")
    fill = [slice(None)] * (len(shape) - indexed)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = fill
    else:
        items += fill
    index = _Index([], [], [], [])
    for item in items:
        dim = len(index.dims)
        if item is None:
            index.shape.append(1)
        elif isinstance(item, slice):
            index.dims.append(_slice_dim(item, shape[dim], name, dim))
            if item.step is not None and item.step.__index__() < 0 and index.dims[-1][1]:
                index.flips.append(len(index.read_shape))
            index.read_shape.append(index.dims[-1][1])
            index.shape.append(index.dims[-1][1])
        else:
            index.dims.append((_int_dim(item, shape[dim], name, dim), 1, 1))
    return index


def _slice_dim(item: slice, extent: int, name: str, dim: int) -> Tuple[int, int, int]:
    """(first, count, step) of the elements a slice takes, in ascending order."""
    try:
        start, stop, step = item.indices(extent)
    except (TypeError, ValueError) as error:  # a bound that is no integer; step 0
        raise _error(type(error), f"tensor {name!r}, dimension {dim}: {error}") from None
    count = len(range(start, stop, step))
    if count == 0:
        return 0, 0, 1
    if step < 0:
        return start + (count - 1) * step, count, -step
    return start, count, step


def _int_dim(item: Any, extent: int, name: str, dim: int) -> int:
    if isinstance(item, bool) or getattr(getattr(item, "dtype", None), "kind", "") == "b":
        index = None  # numpy reads a boolean as a mask: advanced indexing
    else:
        try:
            index = item.__index__()
        except (AttributeError, TypeError):
            index = None
    if index is None:
        raise _error(TypeError, f"tensor {name!r}, dimension {dim}: index {item!r} is not an "
                                "integer, a slice, Ellipsis or None (advanced indexing reads "
                                "the whole tensor: use get_tensor)")
    if not -extent <= index < extent:
        raise _error(IndexError, f"tensor {name!r}, dimension {dim}: index {index} is out of "
                                 f"range for size {extent}")
    return index % extent


class Layout(NamedTuple):
    """Where a selection's bytes are: ``run`` contiguous bytes at each file
    offset ``first + sum(i[k] * strides[k])`` for every ``i[k] < counts[k]``,
    in row-major order of ``counts``: the order they land in a contiguous
    destination.  No counts: one run."""

    first: int
    run: int
    counts: Tuple[int, ...] = ()
    strides: Tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return _prod(self.counts)

    def offsets(self, levels: int) -> List[int]:
        """The file offsets of the combinations of the ``levels`` outermost levels."""
        offsets = [self.first]
        for count, stride in zip(self.counts[:levels], self.strides[:levels]):
            offsets = [o + i * stride for o in offsets for i in range(count)]
        return offsets

    def span(self, levels: int) -> int:
        """Bytes from the first to the last byte of the levels from ``levels`` inwards."""
        return self.run + sum((c - 1) * s for c, s in zip(self.counts[levels:],
                                                            self.strides[levels:]))

    def all_pieces(self) -> List[Tuple[int, int, int]]:
        """(file_offset, buf_offset, size) of every run, in destination order."""
        return [(o, k * self.run, self.run) for k, o in enumerate(self.offsets(len(self.counts)))]


def slice_layout(shape: Sequence[int], bits: int, begin: int,
                 dims: Sequence[Tuple[int, int, int]], name: str = "") -> Layout:
    """The layout of the elements ``dims`` ((first, count, step) per
    dimension) select of a row-major tensor of ``bits``-bit elements at file
    offset ``begin``.  Neighbouring dimensions that are contiguous together
    are one level (a row shard is one run, a column shard one level of
    rows), so a layout has few levels whatever the tensor's size."""
    if any(count == 0 for _, count, _ in dims):
        return Layout(begin, 0, (0,), (0,))
    strides = [_prod(shape[d + 1:]) * bits for d in range(len(shape))]
    run = bits
    levels: List[Tuple[int, int]] = []  # (count, stride), innermost first
    for (_, count, step), stride in zip(reversed(dims), reversed(strides)):
        if count == 1:
            continue  # one index: its offset only
        if not levels and step * stride == run:
            run *= count
        elif levels and step * stride == levels[-1][0] * levels[-1][1]:
            levels[-1] = (levels[-1][0] * count, levels[-1][1])
        else:
            levels.append((count, step * stride))
    levels.reverse()
    first = sum(f * stride for (f, _, _), stride in zip(dims, strides))
    if any(v % 8 for v in [first, run] + [s for _, s in levels]):
        raise _error(ValueError, f"tensor {name!r}: the slice cuts elements that share a byte "
                                 "(safetensors refuses it alike)")
    return Layout(begin + first // 8, run // 8, tuple(c for c, _ in levels),
                  tuple(s // 8 for _, s in levels))


def slice_pieces(shape: Sequence[int], bits: int, begin: int,
                 dims: Sequence[Tuple[int, int, int]]) -> List[Tuple[int, int, int]]:
    """The (file_offset, buf_offset, size) pieces of ``slice_layout``."""
    return slice_layout(shape, bits, begin, dims).all_pieces()


def _dense_levels(layout: Layout) -> int:
    """The outermost level from which the layout's levels are read as one
    span each (module docstring): a level is dense when its units, ``span``
    bytes every ``stride``, touch about half of the pages between them or
    more (a unit at an unaligned offset touches (span + page - 1) / page
    pages on average).  len(counts) when even the innermost is sparse."""
    level = len(layout.counts)
    while level > 0:
        stride = layout.strides[level - 1]
        if (layout.span(level) + _PAGE - 1) / stride < _DENSE:
            break
        level -= 1
    return level


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

    def fill(self, raw: Any, source: Any) -> None:
        """raw (bytes in host memory) = source (a buffer of as many bytes)."""
        import numpy

        host = raw.numpy() if self.framework == "torch" else raw
        host[:] = numpy.frombuffer(source, dtype=numpy.uint8)

    def copy_strided(self, dst: Any, src: Any, shape: Sequence[int],
                     strides: Sequence[int]) -> None:
        """dst (contiguous bytes, row-major over ``shape``) = the bytes of
        ``src`` at ``strides`` (in bytes) over ``shape``."""
        if self.framework == "torch":
            dst.view(tuple(shape)).copy_(src.as_strided(tuple(shape), tuple(strides)))
            return
        from numpy.lib.stride_tricks import as_strided

        dst.reshape(tuple(shape))[...] = as_strided(src, tuple(shape), tuple(strides),
                                                    writeable=False)

    def flip(self, raw: Any, shape: Sequence[int], element: int, axes: Sequence[int]) -> Any:
        """The bytes of a row-major ``shape`` of ``element``-byte elements with
        ``axes`` reversed, contiguous (done on bytes: torch flips no float8)."""
        if self.framework == "torch":
            return raw.view(*shape, element).flip(list(axes)).reshape(-1)
        import numpy

        return numpy.flip(raw.reshape(*shape, element), tuple(axes)).reshape(-1)

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
    ``get_dtype()``, and ``[index]`` (numpy's basic indexing: integers,
    slices of any step, Ellipsis, None), which reads only the bytes the
    index selects and gives what numpy's ``array[index]`` gives."""

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
        index = _normalize(key, self._shape, self._name)
        bits = _DTYPE_BITS[self._dtype]
        if index.flips and bits % 8:
            raise _error(ValueError, f"tensor {self._name!r}: a negative step reverses elements "
                                     f"that share bytes ({self._dtype})")
        layout = slice_layout(self._shape, bits, self._begin, index.dims, self._name)
        return self._owner._read(self._name, self._dtype, index.read_shape, layout,
                                 index.flips, index.shape)

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
        return self._read(name, dtype, list(shape), Layout(begin, end - begin))

    def get_slice(self, name: str) -> TensorSlice:
        """The tensor, to be sliced: ``f.get_slice("w")[:, 0:512]`` reads only those columns."""
        return TensorSlice(self, name)

    def _entry(self, name: str) -> tuple:
        entry = self._tensors.get(name)
        if entry is None:
            raise _error(KeyError, f"{self._header['path']}: no tensor {name!r}")
        return entry

    def _read(self, name: str, dtype: str, read_shape: List[int], layout: Layout,
              flips: Sequence[int] = (), shape: Optional[List[int]] = None) -> Any:
        """The elements of ``layout`` (``read_shape`` of them, in file order),
        with ``flips`` axes reversed, as a tensor of ``shape`` (default
        ``read_shape``) on the target."""
        shape = read_shape if shape is None else shape
        self._target.check_dtype(dtype, shape, name)
        nbytes = _nbytes(dtype, _prod(read_shape))
        raw = self._target.empty_bytes(nbytes)
        if nbytes == 0:
            return self._target.view(raw, dtype, shape, name)
        # Memory fresh from a framework's caching allocator may still be in
        # use by work queued on its stream; the engine writes on its own.
        self._target.synchronize()
        dense = _dense_levels(layout)
        if not layout.counts:
            read = self._file_for(layout.first, layout.run, layout.run).pread(
                raw, layout.run, layout.first)
        elif dense == len(layout.counts):
            read = self._read_pieces(raw, layout.all_pieces())
        else:
            read = self._read_spans(raw, layout, dense)
        if read != nbytes:
            raise _error(OSError, errno.EIO, f"{self._header['path']}: tensor {name!r}: read "
                                             f"{read} of {nbytes} bytes")
        if flips:
            raw = self._target.flip(raw, read_shape, _DTYPE_BITS[dtype] // 8, flips)
        return self._target.view(raw, dtype, shape, name)

    def _read_spans(self, raw: Any, layout: Layout, dense: int) -> int:
        """Reads the span of the levels from ``dense`` inwards once for each
        combination of the outer levels (one span when ``dense`` is 0) into
        staging on the target, and copies the runs out there."""
        span = layout.span(dense)
        offsets = layout.offsets(dense)
        staging = self._target.empty_bytes(span * len(offsets))
        if len(offsets) == 1:
            read = self._file_for(offsets[0], span, span).pread(staging, span, offsets[0])
        else:
            read = self._read_pieces(staging, [(o, k * span, span) for k, o in enumerate(offsets)])
        if read != span * len(offsets):
            return read
        outer = layout.counts[:dense]
        outer_strides = [span * _prod(outer[k + 1:]) for k in range(dense)]
        self._target.copy_strided(raw, staging, (*layout.counts, layout.run),
                                  (*outer_strides, *layout.strides[dense:], 1))
        # The copy runs on the framework's stream: done before the staging
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
