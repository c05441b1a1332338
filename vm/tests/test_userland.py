"""phxrig.userland: which files a Debian program brings into the guest."""

import os
import shutil
import tempfile
import unittest
from pathlib import Path

from phxrig import userland
from phxrig.common import RigError


class GuestUserland(unittest.TestCase):
    def test_resolve_copies_libraries_and_loader(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            (root / "usr/bin").mkdir(parents=True)
            shutil.copy2(Path(shutil.which("ls") or "/bin/ls").resolve(), root / "usr/bin/tool")
            (root / "etc").mkdir()
            (root / "etc/tool.conf").write_text("x\n")
            tools = [userland.GuestTool("pkg", "usr/bin/tool", aliases=("bin/tool2",),
                                        data=("etc/tool.conf",))]
            u = userland.resolve_userland(tools, root)
            self.assertIn("usr/bin/tool", u.files)
            self.assertIn("etc/tool.conf", u.files)
            self.assertIn(f"{userland.GUEST_LIB_DIR}/libc.so.6", u.files)
            self.assertIn(f"{userland.GUEST_LIB_DIR}/ld-linux-x86-64.so.2", u.files)
            self.assertEqual(u.links["bin/tool2"], "/usr/bin/tool")
            self.assertEqual(u.links["lib64/ld-linux-x86-64.so.2"],
                             f"/{userland.GUEST_LIB_DIR}/ld-linux-x86-64.so.2")
            self.assertTrue(u.occupies("bin/tool2"))
            with self.assertRaisesRegex(RigError, "has no usr/bin/missing"):
                userland.resolve_userland([userland.GuestTool("pkg", "usr/bin/missing")], root)

    def test_tools_can_be_left_out(self):
        old = os.environ.get("PHX_VM_TOOLS")
        try:
            os.environ["PHX_VM_TOOLS"] = "none"
            self.assertEqual(userland.selected_tools(), [])
            os.environ["PHX_VM_TOOLS"] = "bogus"
            with self.assertRaises(RigError):
                userland.selected_tools()
        finally:
            if old is None:
                os.environ.pop("PHX_VM_TOOLS", None)
            else:
                os.environ["PHX_VM_TOOLS"] = old
