"""phxrig.kernellog: which kernel log lines fail a run."""

import unittest

from phxrig import kernellog


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
        bad = kernellog.scan_kernel_log(lines)
        self.assertEqual(len(bad), 7, bad)
        self.assertFalse(any("DEBUG" in b or "RETBleed" in b or "nocrs" in b for b in bad))
        self.assertTrue(all(not b.startswith("<") for b in bad))
