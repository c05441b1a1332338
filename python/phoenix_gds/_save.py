# SPDX-License-Identifier: MIT
"""safetensors' save, save_file and load(bytes), for the torch and numpy
faces: the same bytes as safetensors 0.8 writes for the same tensors.

The format, as safetensors writes it: 8 bytes of little-endian header
length, the header as compact JSON (``__metadata__`` first when given, then
each tensor's dtype, shape and data_offsets) padded with spaces to a
multiple of 8 bytes, then the tensors' bytes back to back.  Tensors go in
safetensors' dtype order, largest alignment first, then by name, so each
one's data stays aligned to its element size.

save_file writes through libphoenix's File, each tensor straight from its
memory (GPU memory included) in one batch; the header is validated by the
library's own reader before a load trusts it.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

from . import _phoenix
from ._safetensors import _error, _safetensor_errors, _Target

# safetensors' order: ascending alignment.
_RANK = {name: rank for rank, (name, _) in enumerate(_phoenix.dtypes())}
_MAX_HEADER = 100 << 20  # phx::safetensors::kMaxHeaderSize, safetensors' own bound


class Entry(NamedTuple):
    """One tensor to write: its safetensors dtype, its shape in elements,
    and its bytes (a contiguous uint8 buffer of any device, for File)."""

    dtype: str
    shape: List[int]
    data: Any
    nbytes: int
    cuda: bool = False


def _check_metadata(metadata: Optional[Mapping[str, str]]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata: expected a dict of str to str, not {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"metadata: {key!r}: {value!r}: keys and values must be str, as "
                            "safetensors' are")


def _layout(entries: Dict[str, Entry],
            metadata: Optional[Mapping[str, str]]) -> Tuple[bytes, List[Tuple[Entry, int]]]:
    """The 8-byte length and the header, and each entry with its file offset."""
    _check_metadata(metadata)
    for name in entries:
        if not isinstance(name, str):
            raise TypeError(f"tensor name {name!r}: names must be str")
        if name == "__metadata__":
            raise _error(ValueError, "a tensor cannot be named __metadata__ (the header's "
                                     "metadata key)")
    header: Dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    order = sorted(entries, key=lambda n: (-_RANK[entries[n].dtype], n))
    offset = 0
    for name in order:
        entry = entries[name]
        header[name] = {"dtype": entry.dtype, "shape": entry.shape,
                        "data_offsets": [offset, offset + entry.nbytes]}
        offset += entry.nbytes
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    if len(text) > _MAX_HEADER:
        raise _error(ValueError, f"the header is {len(text)} bytes, above safetensors' limit of "
                                 f"{_MAX_HEADER}")
    start = 8 + len(text)
    placed, offset = [], start
    for name in order:
        placed.append((entries[name], offset))
        offset += entries[name].nbytes
    return struct.pack("<Q", len(text)) + text, placed


def save(entries: Dict[str, Entry], metadata: Optional[Mapping[str, str]],
         host_bytes: Callable[[Entry], bytes]) -> bytes:
    """The file's bytes; ``host_bytes`` gives an entry's bytes in host memory."""
    head, placed = _layout(entries, metadata)
    return b"".join([head] + [host_bytes(entry) for entry, _ in placed])


def save_file(entries: Dict[str, Entry], filename: Union[str, os.PathLike],
              metadata: Optional[Mapping[str, str]]) -> None:
    """Writes the file with one batch of writes, each tensor from its own memory."""
    from . import File

    head, placed = _layout(entries, metadata)
    requests = [(head, len(head), 0)]
    requests += [(entry.data, entry.nbytes, offset) for entry, offset in placed if entry.nbytes]
    # Host memory through the page cache, as safetensors writes; GPU memory
    # goes O_DIRECT where its engine moves it straight to storage.
    cuda = any(entry.cuda for entry, _ in placed)
    with _safetensor_errors(), File(filename, "w", direct="auto" if cuda else "off") as f:
        f.pwrite_batch(requests)


def load(data: Any, framework: str) -> Dict[str, Any]:
    """Every tensor of a safetensors file held in ``data`` (bytes), as writable
    CPU tensors of ``framework``, checked by the library's header reader."""
    with _safetensor_errors():
        header = _phoenix.parse_header(data)
    target = _Target(framework, "cpu")
    view = memoryview(data).cast("B")
    out = {}
    for name, (dtype, shape, begin, end) in sorted(header["tensors"].items(),
                                                  key=lambda item: item[1][2]):
        target.check_dtype(dtype, shape, name)
        raw = target.empty_bytes(end - begin)
        if end > begin:
            target.fill(raw, view[begin:end])
        out[name] = target.view(raw, dtype, list(shape), name)
    return out
