"""A work folder with a raw image and two ivshmem files, and a report.log
written line by line and judged: shared by test_verdict and test_evidence."""

import shutil
import tempfile
import unittest
from pathlib import Path

from phxrig import config, verdict
from phxrig.images import make_raw_image


class ReportCase(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="phx-test-rig-"))
        self.work = self.dir / "work"
        self.work.mkdir()
        make_raw_image(self.work / "raw.img", 2)
        self.raw = (self.work / "raw.img").read_bytes()
        self.shm = [self.dir / "shm0", self.dir / "shm1"]
        for p in self.shm:
            with open(p, "wb") as f:
                f.truncate(config.SHM_MIB << 20)
        # shm0[4096:8192] = raw[65536:69632]
        with open(self.shm[0], "r+b") as f:
            f.seek(4096)
            f.write(self.raw[65536:69632])

    def tearDown(self):
        shutil.rmtree(self.dir)

    def report(self, *lines: str, dmesg=("<6>[ 1.0] hello",), exit_code=0) -> verdict.Verdict:
        text = [*lines]
        if dmesg is not None:
            text += ["PHX-DMESG-BEGIN", *dmesg, "PHX-DMESG-END"]
        if exit_code is not None:
            text.append(f"PHX-EXIT {exit_code}")
        (self.work / "report.log").write_text("\r\n".join(text) + "\r\n")
        return verdict.judge(self.work, self.shm, None)
