#!/usr/bin/env python3
"""Unit tests of the rig's host side (no QEMU): report protocol, evidence
checks, kernel log scan, initramfs writer, module order, version sort.

  python3 -m unittest discover -s vm -p 'test_*.py'      (about a second)
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import rig  # noqa: E402


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


class VersionSort(unittest.TestCase):
    def test_numeric(self):
        rels = ["6.12.9+deb12-amd64", "6.12.117+deb12-amd64", "6.12.57+deb12-amd64"]
        self.assertEqual(sorted(rels, key=rig.version_key)[-1], "6.12.117+deb12-amd64")
        self.assertEqual(sorted(["6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-10-amd64"],
                                key=rig.version_key)[-1], "6.1.0-57-amd64")

    def test_series_patterns_exclude_cloud_and_rt(self):
        pat = rig.SERIES["6.12"].image
        self.assertTrue(pat.match("linux-image-6.12.117+deb12-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-cloud-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-rt-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-amd64"))
        self.assertTrue(rig.SERIES["6.1"].image.match("linux-image-6.1.0-57-amd64-unsigned"))
        self.assertFalse(rig.SERIES["6.1"].image.match("linux-image-6.12.117+deb12-amd64-unsigned"))
        sid = rig.SERIES["7.2"].image
        self.assertEqual(sid.match("linux-image-7.2.13+deb14-amd64").group(1), "7.2.13+deb14-amd64")
        self.assertFalse(sid.match("linux-image-7.2.13+deb14-cloud-amd64"))
        self.assertFalse(sid.match("linux-image-7.2.13+deb14-amd64-dbg"))
        self.assertEqual(rig.image_package("7.2", "7.2.13+deb14-amd64"), "linux-image-7.2.13+deb14-amd64")
        self.assertEqual(rig.image_package("6.1", "6.1.0-57-amd64"), "linux-image-6.1.0-57-amd64-unsigned")

    def test_topology_puts_drives_and_bars_behind_one_switch(self):
        from pathlib import Path
        k = rig.Kernel("6.12", "6.12.1+deb12-amd64", Path("/nonexistent"), [])
        shm = [Path(f"/dev/shm/x{i}") for i in range(len(rig.SHM_SIZES_MIB))]
        orig = rig.boot_kernel_image
        rig.boot_kernel_image = lambda k: Path("/vmlinuz")
        try:
            cmd = rig.qemu_command(k, Path("/w"), "tcg", Path("/i"), shm, False, False)
        finally:
            rig.boot_kernel_image = orig
        devs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-device"]
        nvme = [d for d in devs if d.startswith("nvme,")]
        bars = [d for d in devs if d.startswith("ivshmem-plain,")]
        self.assertEqual(len(nvme), 2)
        self.assertEqual(len(bars), rig.NSHM + 1)
        behind = [d for d in nvme + bars if ",bus=dp" in d]
        self.assertEqual(len(behind), 2 + rig.NSHM)
        self.assertEqual([d for d in bars if "bus=pcie.0" in d], [bars[-1]])
        ports = [d for d in devs if d.startswith("xio3130-downstream,")]
        self.assertEqual(len(ports), 2 + rig.NSHM)
        self.assertTrue(all(",bus=sw0," in p for p in ports))


class CpioWriter(unittest.TestCase):
    def test_round_trip(self):
        c = rig.Cpio()
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
        c = rig.Cpio()
        c.file("x", b"1")
        with self.assertRaises(rig.RigError):
            c.file("x", b"2")


class ModuleOrder(unittest.TestCase):
    def test_dependencies_first(self):
        with tempfile.TemporaryDirectory() as d:
            k = rig.Kernel("6.12", "9.9.9-test", Path(d), [])
            k.moddir.mkdir(parents=True)
            (k.moddir / "modules.dep").write_text(
                "kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz\n"
                "kernel/fs/jbd2/jbd2.ko.xz:\n"
                "kernel/fs/mbcache.ko.xz:\n"
                "kernel/lib/crc16.ko.xz:\n"
                "kernel/drivers/nvme/host/nvme.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz\n"
                "kernel/drivers/nvme/host/nvme-core.ko.xz:\n")
            (k.moddir / "modules.builtin").write_text("kernel/crypto/crc32c_generic.ko\n")
            order = [p.name for p in rig.module_load_order(k, ["nvme", "crc32c_generic", "ext4"])]
            self.assertEqual(order, ["nvme-core.ko.xz", "nvme.ko.xz", "crc16.ko.xz",
                                     "mbcache.ko.xz", "jbd2.ko.xz", "ext4.ko.xz"])
            with self.assertRaises(rig.RigError):
                rig.module_load_order(k, ["nonexistent"])


class ModuleIndex(unittest.TestCase):
    def test_dep_and_alias_cut_to_shipped(self):
        with tempfile.TemporaryDirectory() as d:
            k = rig.Kernel("6.12", "9.9.9-test", Path(d), [])
            k.moddir.mkdir(parents=True)
            (k.moddir / "modules.dep").write_text(
                "kernel/drivers/nvme/target/nvmet-tcp.ko.xz: kernel/drivers/nvme/target/nvmet.ko.xz"
                " kernel/fs/configfs/configfs.ko.xz\n"
                "kernel/drivers/nvme/target/nvmet.ko.xz: kernel/fs/configfs/configfs.ko.xz\n"
                "kernel/fs/configfs/configfs.ko.xz:\n"
                "kernel/fs/nfsd/nfsd.ko.xz:\n")
            (k.moddir / "modules.alias").write_text(
                "# Aliases extracted from modules themselves.\n"
                "alias nvmet-transport-3 nvmet_tcp\n"
                "alias fs-nfsd nfsd\n")
            (k.moddir / "modules.builtin").write_text("")
            shipped = rig.module_load_order(k, ["nvmet_tcp"])
            dep, alias = rig.module_index(k, shipped)
            self.assertEqual(dep.splitlines(), ["nvmet-tcp.ko: nvmet.ko configfs.ko",
                                                "nvmet.ko: configfs.ko", "configfs.ko:"])
            self.assertEqual(alias.splitlines(), ["alias nvmet-transport-3 nvmet_tcp"])


class GuestUserland(unittest.TestCase):
    def test_dynamic_info_of_a_host_program(self):
        # Any dynamically linked host program: libc and the x86-64 loader.
        prog = Path(shutil.which("ls") or "/bin/ls").resolve()
        needed, interp = rig.elf_dynamic_info(prog)
        self.assertIn("libc.so.6", needed)
        self.assertEqual(interp, "/lib64/ld-linux-x86-64.so.2")
        self.assertEqual(rig.elf_dynamic_info(rig.busybox_path()), ([], None))

    def test_resolve_copies_libraries_and_loader(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            (root / "usr/bin").mkdir(parents=True)
            shutil.copy2(Path(shutil.which("ls") or "/bin/ls").resolve(), root / "usr/bin/tool")
            (root / "etc").mkdir()
            (root / "etc/tool.conf").write_text("x\n")
            tools = [rig.GuestTool("pkg", "usr/bin/tool", aliases=("bin/tool2",),
                                   data=("etc/tool.conf",))]
            u = rig.resolve_userland(tools, root)
            self.assertIn("usr/bin/tool", u.files)
            self.assertIn("etc/tool.conf", u.files)
            self.assertIn(f"{rig.GUEST_LIB_DIR}/libc.so.6", u.files)
            self.assertIn(f"{rig.GUEST_LIB_DIR}/ld-linux-x86-64.so.2", u.files)
            self.assertEqual(u.links["bin/tool2"], "/usr/bin/tool")
            self.assertEqual(u.links["lib64/ld-linux-x86-64.so.2"],
                             f"/{rig.GUEST_LIB_DIR}/ld-linux-x86-64.so.2")
            self.assertTrue(u.occupies("bin/tool2"))
            with self.assertRaisesRegex(rig.RigError, "has no usr/bin/missing"):
                rig.resolve_userland([rig.GuestTool("pkg", "usr/bin/missing")], root)

    def test_tools_can_be_left_out(self):
        old = os.environ.get("PHX_VM_TOOLS")
        try:
            os.environ["PHX_VM_TOOLS"] = "none"
            self.assertEqual(rig.selected_tools(), [])
            os.environ["PHX_VM_TOOLS"] = "bogus"
            with self.assertRaises(rig.RigError):
                rig.selected_tools()
        finally:
            if old is None:
                os.environ.pop("PHX_VM_TOOLS", None)
            else:
                os.environ["PHX_VM_TOOLS"] = old


class KernelLogScan(unittest.TestCase):
    def test_patterns(self):
        lines = [
            "<4>[    1.0] BUG: unable to handle page fault for address: 0",
            "<3>[    2.0] BUG kmalloc-64 (Tainted: G           O): Poison overwritten",
            "<4>[    3.0] WARNING: CPU: 0 PID: 1 at mm/memremap.c:1 x",
            "<3>[    4.0] phxfs: dev0: leaked 3 pins",
            "<6>[    5.0] phxfs: DEBUG registration 1",
            "<6>[    6.0] PCI: Using host bridge windows from ACPI; if necessary, use \"pci=nocrs\" and report a bug",
            "<6>[    7.0] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!",
            "<4>[    8.0] Call Trace:",
            "<0>[    9.0] Kernel panic - not syncing: Fatal exception",
            "<3>[   10.0] BUG: Bad page state in process x  pfn:12345",
        ]
        bad = rig.scan_kernel_log(lines)
        self.assertEqual(len(bad), 7, bad)
        self.assertFalse(any("DEBUG" in b or "RETBleed" in b or "nocrs" in b for b in bad))
        self.assertTrue(all(not b.startswith("<") for b in bad))


class Verdict(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="phx-test-rig-"))
        self.work = self.dir / "work"
        self.work.mkdir()
        rig.make_raw_image(self.work / "raw.img", 2)
        self.raw = (self.work / "raw.img").read_bytes()
        self.shm = [self.dir / "shm0", self.dir / "shm1"]
        for p in self.shm:
            with open(p, "wb") as f:
                f.truncate(rig.SHM_MIB << 20)
        # shm0[4096:8192] = raw[65536:69632]
        with open(self.shm[0], "r+b") as f:
            f.seek(4096)
            f.write(self.raw[65536:69632])

    def tearDown(self):
        shutil.rmtree(self.dir)

    def report(self, *lines: str, dmesg=("<6>[ 1.0] hello",), exit_code=0) -> rig.Verdict:
        text = [*lines]
        if dmesg is not None:
            text += ["PHX-DMESG-BEGIN", *dmesg, "PHX-DMESG-END"]
        if exit_code is not None:
            text.append(f"PHX-EXIT {exit_code}")
        (self.work / "report.log").write_text("\r\n".join(text) + "\r\n")
        return rig.judge(self.work, self.shm, None)

    def test_pass(self):
        v = self.report('PHX-INIT ready uptime=5.0',
                        'PHX-RESULT {"test":"a","status":"pass","detail":""}',
                        'PHX-RESULT {"test":"b","status":"skip","detail":"no"}',
                        'free text from the guest',
                        'PHX-NOTE cycles=10 memfree=1870212',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":0,"shm_off":4096,"disk_off":65536,"len":4096}')
        self.assertEqual(v.problems, [])
        self.assertEqual([e["status"] for e in v.evidence], ["pass"])
        self.assertEqual(len(v.results), 2)
        self.assertEqual(v.notes, ["cycles=10 memfree=1870212"])

    def test_evidence_mismatch_and_bounds(self):
        v = self.report('PHX-RESULT {"test":"a","status":"pass","detail":""}',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":0,"shm_off":4096,"disk_off":0,"len":4096}',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":2,"shm_off":0,"disk_off":0,"len":1}',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":1,"shm_off":0,"disk_off":2097000,"len":4096}',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":1,"shm_off":0,"disk_off":0,"len":0}',
                        'PHX-EVIDENCE {"kind":"nope","shm":1,"shm_off":0,"len":1}',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":1}')
        self.assertEqual([e["status"] for e in v.evidence], ["fail"] * 6)
        self.assertIn("evidence mismatch", v.problems)

    def test_missing_pieces(self):
        v = self.report(exit_code=None, dmesg=None)
        self.assertTrue(any("no PHX-EXIT" in p for p in v.problems))
        self.assertIn("no PHX-RESULT lines", v.problems)
        self.assertTrue(any("no PHX-EVIDENCE" in p for p in v.problems))

    def test_guest_failures(self):
        v = self.report('PHX-RESULT {"test":"a","status":"fail","detail":"x"}',
                        'PHX-RESULT {"test":"b","status":"maybe"}',
                        'PHX-RESULT {"test":"c"',
                        'PHX-WHAT x',
                        'PHX-INIT-ERROR mount failed',
                        'PHX-EVIDENCE {"kind":"shm_eq_disk","shm":0,"shm_off":4096,"disk_off":65536,"len":4096}',
                        exit_code=1, dmesg=["<4>[ 1.0] WARNING: CPU: 0 PID: 1 at x"])
        text = "\n".join(v.problems)
        for want in ("guest tests failed", "malformed PHX-RESULT", "unknown protocol line",
                     "guest init: mount failed", "exited with 1", "kernel log has 1 bad"):
            self.assertIn(want, text)

    def test_console_scanned_without_dump(self):
        (self.work / "console.log").write_text("[ 1.0] Kernel panic - not syncing: Fatal exception\n")
        v = self.report('PHX-RESULT {"test":"a","status":"pass","detail":""}', dmesg=None, exit_code=None)
        self.assertEqual(len(v.dmesg_bad), 1)

    def test_truncated_dump(self):
        (self.work / "report.log").write_text('PHX-RESULT {"test":"a","status":"pass"}\nPHX-DMESG-BEGIN\n<6>x\n')
        v = rig.judge(self.work, self.shm, None)
        self.assertTrue(any("truncated" in p for p in v.problems))
        self.assertTrue(any("no PHX-EXIT" in p for p in v.problems))

    @unittest.skipUnless(shutil.which("mkfs.ext4") and shutil.which("debugfs"), "e2fsprogs missing")
    def test_ext4_file_evidence(self):
        src = self.dir / "tree"
        (src / "phx").mkdir(parents=True)
        (src / "phx" / "x.bin").write_bytes(b"\0" * 100 + self.raw[65536:69632])
        with open(self.work / "ext4.img", "wb") as f:
            f.truncate(8 << 20)
        subprocess.run(["mkfs.ext4", "-F", "-q", "-d", str(src), str(self.work / "ext4.img")],
                       check=True)
        v = self.report('PHX-RESULT {"test":"a","status":"pass","detail":""}',
                        'PHX-EVIDENCE {"kind":"shm_eq_file","shm":0,"shm_off":4096,"path":"phx/x.bin","file_off":100,"len":4096}',
                        'PHX-EVIDENCE {"kind":"shm_eq_file","shm":0,"shm_off":4096,"path":"phx/x.bin","file_off":0,"len":4096}',
                        'PHX-EVIDENCE {"kind":"shm_eq_file","shm":0,"shm_off":0,"path":"phx/none.bin","file_off":0,"len":1}',
                        'PHX-EVIDENCE {"kind":"shm_eq_file","shm":0,"shm_off":0,"path":"../etc/passwd","file_off":0,"len":1}')
        self.assertEqual([e["status"] for e in v.evidence], ["pass", "fail", "fail", "fail"])
        self.assertEqual(rig.e2fsck(self.work)["status"], "pass")


class ElfKind(unittest.TestCase):
    def test_kinds(self):
        self.assertEqual(rig.elf_kind(Path(sys.executable).resolve()), "dynamic")
        bb = shutil.which("busybox")
        if bb and os.path.realpath(bb).endswith("busybox"):
            self.assertIn(rig.elf_kind(Path(bb)), ("static", "dynamic"))
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"#!/bin/sh\n")
            f.flush()
            self.assertIsNone(rig.elf_kind(Path(f.name)))


if __name__ == "__main__":
    unittest.main()
