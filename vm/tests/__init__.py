"""Unit tests of the rig's host side (no QEMU), one file per module of
vm/phxrig.  From vm/ (about a second; vm/run runs them first):

  python3 -B -m unittest discover -q
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
