"""phxrig.qemu: the PCIe topology of the command line."""

import unittest
from pathlib import Path
from unittest import mock

from phxrig import config, qemu
from phxrig.kernels import Kernel


class Topology(unittest.TestCase):
    def test_topology_puts_drives_and_bars_behind_one_switch(self):
        k = Kernel("6.12", "6.12.1+deb12-amd64", Path("/nonexistent"), [])
        shm = [Path(f"/dev/shm/x{i}") for i in range(len(config.SHM_SIZES_MIB))]
        with mock.patch.object(qemu, "boot_kernel_image", lambda k: Path("/vmlinuz")):
            cmd = qemu.qemu_command(k, Path("/w"), "tcg", Path("/i"), shm, False, False)
        devs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-device"]
        nvme = [d for d in devs if d.startswith("nvme,")]
        bars = [d for d in devs if d.startswith("ivshmem-plain,")]
        self.assertEqual(len(nvme), 2)
        self.assertEqual(len(bars), config.NSHM + 1)
        behind = [d for d in nvme + bars if ",bus=dp" in d]
        self.assertEqual(len(behind), 2 + config.NSHM)
        self.assertEqual([d for d in bars if "bus=pcie.0" in d], [bars[-1]])
        ports = [d for d in devs if d.startswith("xio3130-downstream,")]
        self.assertEqual(len(ports), 2 + config.NSHM)
        self.assertTrue(all(",bus=sw0," in p for p in ports))
