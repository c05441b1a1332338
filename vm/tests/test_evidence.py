"""phxrig.evidence: PHX-EVIDENCE claims checked against the raw disk and
files of the ext4 image."""

import shutil
import subprocess
import unittest

from phxrig import verdict

from .reportcase import ReportCase


class Evidence(ReportCase):
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
        self.assertEqual(verdict.e2fsck(self.work)["status"], "pass")
