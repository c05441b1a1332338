"""The kernel image QEMU boots: the packaged bzImage, or the vmlinux inside
it, extracted once into the cache, for a PVH boot."""

from __future__ import annotations

import fcntl
import gzip
import io
import lzma
import os
import re
import struct
import subprocess
from pathlib import Path

from .common import RigError, need_tools
from .config import cache_dir
from .kernels import Kernel


def pvh_vmlinux(k: Kernel) -> Path:
    """The uncompressed vmlinux of k's bzImage, extracted once into the cache.

    QEMU boots an ELF vmlinux with a PVH note straight in 32-bit mode: no
    real-mode setup and no decompression, about 5 s less per boot under TCG.
    """
    out = k.root / "boot" / f"vmlinux-{k.release}"
    if out.is_file():
        return out
    out.parent.mkdir(exist_ok=True)
    with open(cache_dir() / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if out.is_file():
            return out
        img = k.vmlinuz.read_bytes()
        if img[0x202:0x206] != b"HdrS":
            raise RigError(f"{k.vmlinuz}: not a bzImage")
        setup_sects = img[0x1F1] or 4
        payload_off, payload_len = struct.unpack_from("<II", img, 0x248)
        start = (setup_sects + 1) * 512 + payload_off
        payload = img[start:start + payload_len]
        if payload.startswith(b"\xfd7zXZ\x00"):
            data = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
        elif payload.startswith(b"\x28\xb5\x2f\xfd"):
            need_tools("zstd")
            # The payload ends with the 4-byte uncompressed size, which zstd
            # would take for a truncated next frame.
            proc = subprocess.run(["zstd", "-dcq"], input=payload[:-4], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
            if proc.returncode != 0:
                raise RigError(f"zstd could not unpack {k.vmlinuz}: {proc.stderr.decode().strip()}")
            data = proc.stdout
        elif payload.startswith(b"\x1f\x8b"):
            data = gzip.GzipFile(fileobj=io.BytesIO(payload)).read()
        else:
            raise RigError(f"{k.vmlinuz}: unknown payload compression {payload[:6].hex()}")
        if not data.startswith(b"\x7fELF"):
            raise RigError(f"{k.vmlinuz}: payload is not an ELF vmlinux")
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(out)
        return out


def boot_kernel_image(k: Kernel) -> Path:
    """vmlinux (PVH entry) when the kernel has CONFIG_PVH, else the bzImage;
    PHX_VM_BOOT=bzimage forces the bzImage."""
    mode = os.environ.get("PHX_VM_BOOT", "auto")
    if mode not in ("auto", "pvh", "bzimage"):
        raise RigError(f"PHX_VM_BOOT={mode!r}: use auto, pvh or bzimage")
    has_pvh = re.search(r"^CONFIG_PVH=y$", k.config.read_text(), re.M) is not None
    if mode == "pvh" and not has_pvh:
        raise RigError(f"{k.release} has no CONFIG_PVH: cannot boot its vmlinux")
    if mode == "bzimage" or not has_pvh:
        return k.vmlinuz
    return pvh_vmlinux(k)
