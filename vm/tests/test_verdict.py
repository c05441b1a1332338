"""phxrig.verdict: the report protocol and what fails a run."""

from phxrig import verdict

from .reportcase import ReportCase


class Verdict(ReportCase):
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

    def test_panic_before_init_started_is_named(self):
        (self.work / "console.log").write_text(
            "Booting from ROM..[    3.35] Oops: int3: 0000 [#1] SMP NOPTI\n"
            "[    3.36] Kernel panic - not syncing: Fatal exception in interrupt\n")
        (self.work / "report.log").write_text("")
        why = verdict.died_before_init(self.work)
        self.assertIsNotNone(why)
        self.assertIn("Oops: int3", why)

    def test_panic_after_init_started_is_ours(self):
        (self.work / "console.log").write_text("[ 9.0] Kernel panic - not syncing: Fatal exception\n")
        (self.work / "report.log").write_text("PHX-INIT-START uptime=3.10\r\n")
        self.assertIsNone(verdict.died_before_init(self.work))
        v = verdict.judge(self.work, self.shm, None)
        self.assertTrue(v.init_started)
        self.assertFalse(any("unknown protocol line" in p for p in v.problems))

    def test_no_panic_is_no_early_death(self):
        (self.work / "console.log").write_text("[ 1.0] booting\n")
        self.assertIsNone(verdict.died_before_init(self.work))

    def test_truncated_dump(self):
        (self.work / "report.log").write_text('PHX-RESULT {"test":"a","status":"pass"}\nPHX-DMESG-BEGIN\n<6>x\n')
        v = verdict.judge(self.work, self.shm, None)
        self.assertTrue(any("truncated" in p for p in v.problems))
        self.assertTrue(any("no PHX-EXIT" in p for p in v.problems))
