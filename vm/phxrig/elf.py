"""The little the rig reads of ELF files: static or dynamic, and a dynamic
program's DT_NEEDED libraries and loader."""

from __future__ import annotations

import struct
from pathlib import Path

from .common import RigError


def elf_kind(path: Path) -> str | None:
    """'static', 'dynamic', 'rel' (object/module) for 64-bit ELF; None otherwise."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if len(hdr) < 64 or hdr[:4] != b"\x7fELF":
            return None
        if hdr[4] != 2 or hdr[5] != 1:
            return "foreign"
        e_type = struct.unpack_from("<H", hdr, 16)[0]
        if e_type == 1:
            return "rel"
        phoff = struct.unpack_from("<Q", hdr, 32)[0]
        phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        for i in range(phnum):
            if struct.unpack_from("<I", ph, i * phentsize)[0] == 3:  # PT_INTERP
                return "dynamic"
        return "static"


def elf_dynamic_info(path: Path) -> tuple[list[str], str | None]:
    """(DT_NEEDED sonames, PT_INTERP) of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RigError(f"{path}: not a 64-bit little-endian ELF")
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads, dynamic, interp = [], None, None
    for i in range(phnum):
        p_type, _, off, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data,
                                                                  phoff + i * phentsize)
        if p_type == 1:
            loads.append((vaddr, off, filesz))
        elif p_type == 2:
            dynamic = (off, filesz)
        elif p_type == 3:
            interp = data[off:off + filesz].rstrip(b"\0").decode()
    if dynamic is None:
        return [], interp

    def file_offset(vaddr: int) -> int:
        for start, off, size in loads:
            if start <= vaddr < start + size:
                return vaddr - start + off
        raise RigError(f"{path}: address {vaddr:#x} is in no loaded segment")

    needed, strtab = [], None
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, pos)
        if tag == 0:
            break
        if tag == 1:
            needed.append(val)
        elif tag == 5:
            strtab = file_offset(val)
    if needed and strtab is None:
        raise RigError(f"{path}: DT_NEEDED without DT_STRTAB")
    names = [data[strtab + n:data.index(b"\0", strtab + n)].decode() for n in needed]
    return names, interp
