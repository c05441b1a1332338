"""phxrig.elf: ELF kinds, DT_NEEDED and the loader of host programs."""

import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

from phxrig import elf
from phxrig.initramfs import busybox_path


class ElfKind(unittest.TestCase):
    def test_kinds(self):
        self.assertEqual(elf.elf_kind(Path(sys.executable).resolve()), "dynamic")
        bb = shutil.which("busybox")
        if bb and os.path.realpath(bb).endswith("busybox"):
            self.assertIn(elf.elf_kind(Path(bb)), ("static", "dynamic"))
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"#!/bin/sh\n")
            f.flush()
            self.assertIsNone(elf.elf_kind(Path(f.name)))


class DynamicInfo(unittest.TestCase):
    def test_dynamic_info_of_a_host_program(self):
        # Any dynamically linked host program: libc and the x86-64 loader.
        prog = Path(shutil.which("ls") or "/bin/ls").resolve()
        needed, interp = elf.elf_dynamic_info(prog)
        self.assertIn("libc.so.6", needed)
        self.assertEqual(interp, "/lib64/ld-linux-x86-64.so.2")
        self.assertEqual(elf.elf_dynamic_info(busybox_path()), ([], None))
