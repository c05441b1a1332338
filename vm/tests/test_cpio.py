"""phxrig.cpio: the newc writer, read back the kernel's way."""

import stat
import unittest

from phxrig.common import RigError
from phxrig.cpio import Cpio


def parse_newc(data: bytes) -> dict[str, tuple[int, bytes, tuple[int, int]]]:
    """name -> (mode, data, (rdevmajor, rdevminor)), the kernel's way."""
    out = {}
    off = 0
    while True:
        assert data[off:off + 6] == b"070701", f"bad magic at {off}"
        f = [int(data[off + 6 + 8 * i: off + 14 + 8 * i], 16) for i in range(13)]
        mode, size, rmaj, rmin, namesize = f[1], f[6], f[9], f[10], f[11]
        off += 110
        name = data[off:off + namesize - 1].decode()
        off += namesize
        off += -off % 4
        body = data[off:off + size]
        off += size
        off += -off % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body, (rmaj, rmin))


class CpioWriter(unittest.TestCase):
    def test_round_trip(self):
        c = Cpio()
        c.file("a/b/c.txt", b"hello", 0o640)
        c.symlink("bin/sh", "busybox")
        c.chardev("dev/console", 5, 1)
        entries = parse_newc(c.finish())
        self.assertEqual(entries["a/b/c.txt"][1], b"hello")
        self.assertEqual(stat.S_IMODE(entries["a/b/c.txt"][0]), 0o640)
        self.assertTrue(stat.S_ISDIR(entries["a/b"][0]))
        self.assertTrue(stat.S_ISDIR(entries["a"][0]))
        self.assertEqual(entries["bin/sh"][1], b"busybox")
        self.assertTrue(stat.S_ISLNK(entries["bin/sh"][0]))
        self.assertTrue(stat.S_ISCHR(entries["dev/console"][0]))
        self.assertEqual(entries["dev/console"][2], (5, 1))

    def test_duplicate_refused(self):
        c = Cpio()
        c.file("x", b"1")
        with self.assertRaises(RigError):
            c.file("x", b"2")
