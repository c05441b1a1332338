# SPDX-License-Identifier: MIT
"""Bit-for-bit comparison of a load with the reference.

Tensor loaders are compared with safetensors' own load of the same files
(safetensors.torch.load_file onto the host, read with pread into the
process's own memory; safetensors.numpy in a CPU dry run without torch): the same set of names, and
for each tensor the same dtype, the same shape and the same bytes
(torch.equal over uint8 views, so that NaN payloads compare as bits, not
as numbers).  Raw readers and the ceilings are compared with the files'
bytes.  A mismatch is reported with the first name or offset that
differs; nothing loaded is a mismatch too."""

from __future__ import annotations

CHUNK = 64 << 20


def _is_torch(t) -> bool:
    return type(t).__module__.startswith("torch")


def _equal_bits(g, r) -> bool:
    if _is_torch(g):
        import torch

        if r.device != g.device:
            r = r.to(g.device)
        return torch.equal(g.detach().reshape(-1).view(torch.uint8),
                           r.detach().reshape(-1).view(torch.uint8))
    return g.tobytes() == r.tobytes()  # numpy (the CPU dry run without torch)


def compare_tensors(got, ref) -> tuple[bool, str]:
    """(True, "") when @got ({name: tensor}) equals @ref bit for bit.
    Tensors are torch's, or numpy arrays where torch is missing."""
    if not got:
        return False, "nothing loaded"
    if set(got) != set(ref):
        missing = sorted(set(ref) - set(got))[:3]
        extra = sorted(set(got) - set(ref))[:3]
        return False, (f"tensor names differ: {len(got)} loaded, {len(ref)} in the files; "
                       f"missing {missing}, unexpected {extra}")
    for name, r in ref.items():
        g = got[name]
        if type(g) is not type(r):
            return False, f"{name}: a {type(g).__name__}, expected a {type(r).__name__}"
        if g.dtype != r.dtype:
            return False, f"{name}: dtype {g.dtype}, expected {r.dtype}"
        if tuple(g.shape) != tuple(r.shape):
            return False, f"{name}: shape {tuple(g.shape)}, expected {tuple(r.shape)}"
        if not _equal_bits(g, r):
            return False, f"{name}: bytes differ"
    return True, ""


def compare_bytes(read_loaded, paths) -> tuple[bool, str]:
    """Compares a raw load with the files.  @read_loaded(i, offset, n)
    returns n bytes of file i as loaded."""
    for i, path in enumerate(paths):
        with open(path, "rb", buffering=0) as f:
            offset = 0
            while True:
                want = f.read(CHUNK)
                if not want:
                    break
                have = read_loaded(i, offset, len(want))
                if bytes(have) != want:
                    return False, f"{path}: bytes differ in [{offset}, {offset + len(want)})"
                offset += len(want)
    return True, ""
