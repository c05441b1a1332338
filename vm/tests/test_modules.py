"""phxrig.modules: load order from modules.dep, the index shipped for modprobe."""

import tempfile
import unittest
from pathlib import Path

from phxrig import modules
from phxrig.common import RigError
from phxrig.kernels import Kernel


def fake_kernel(d: str, **files: str) -> Kernel:
    """A kernel whose lib/modules/<release> holds files (modules_dep ->
    modules.dep, ...)."""
    k = Kernel("6.12", "9.9.9-test", Path(d), [])
    k.moddir.mkdir(parents=True)
    for name, text in files.items():
        (k.moddir / name.replace("_", ".")).write_text(text)
    return k


class ModuleOrder(unittest.TestCase):
    def test_dependencies_first(self):
        with tempfile.TemporaryDirectory() as d:
            k = fake_kernel(
                d, modules_builtin="kernel/crypto/crc32c_generic.ko\n", modules_dep=
                "kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz\n"
                "kernel/fs/jbd2/jbd2.ko.xz:\n"
                "kernel/fs/mbcache.ko.xz:\n"
                "kernel/lib/crc16.ko.xz:\n"
                "kernel/drivers/nvme/host/nvme.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz\n"
                "kernel/drivers/nvme/host/nvme-core.ko.xz:\n")
            order = [p.name for p in modules.module_load_order(k, ["nvme", "crc32c_generic", "ext4"])]
            self.assertEqual(order, ["nvme-core.ko.xz", "nvme.ko.xz", "crc16.ko.xz",
                                     "mbcache.ko.xz", "jbd2.ko.xz", "ext4.ko.xz"])
            with self.assertRaises(RigError):
                modules.module_load_order(k, ["nonexistent"])


class ModuleIndex(unittest.TestCase):
    def test_dep_and_alias_cut_to_shipped(self):
        with tempfile.TemporaryDirectory() as d:
            k = fake_kernel(
                d, modules_builtin="", modules_dep=
                "kernel/drivers/nvme/target/nvmet-tcp.ko.xz: kernel/drivers/nvme/target/nvmet.ko.xz"
                " kernel/fs/configfs/configfs.ko.xz\n"
                "kernel/drivers/nvme/target/nvmet.ko.xz: kernel/fs/configfs/configfs.ko.xz\n"
                "kernel/fs/configfs/configfs.ko.xz:\n"
                "kernel/fs/nfsd/nfsd.ko.xz:\n", modules_alias=
                "# Aliases extracted from modules themselves.\n"
                "alias nvmet-transport-3 nvmet_tcp\n"
                "alias fs-nfsd nfsd\n")
            shipped = modules.module_load_order(k, ["nvmet_tcp"])
            dep, alias = modules.module_index(k, shipped)
            self.assertEqual(dep.splitlines(), ["nvmet-tcp.ko: nvmet.ko configfs.ko",
                                                "nvmet.ko: configfs.ko", "configfs.ko:"])
            self.assertEqual(alias.splitlines(), ["alias nvmet-transport-3 nvmet_tcp"])
