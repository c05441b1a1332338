"""The command line: vm/fetch-kernels (fetch) and vm/run (run)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from .common import RigError, info, need_tools
from .config import VM_DIR, WORK_ROOT
from .kernels import SERIES, fetch
from .runner import run_kernel, variant


def series_list(arg: str) -> list[str]:
    if arg == "all":
        return list(SERIES)
    if arg not in SERIES:
        raise RigError(f"--kernel {arg}: use {', '.join(SERIES)} or all")
    return [arg]


def self_check() -> None:
    """Runs vm/tests (well under a second): a verdict is only as good as the
    code that reaches it."""
    proc = subprocess.run([sys.executable, "-B", "-m", "unittest", "discover", "-q",
                           "-s", "tests", "-t", "."], cwd=VM_DIR,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RigError(f"the rig's own unit tests (vm/tests) fail:\n{proc.stdout.strip()}")


def cmd_fetch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vm/fetch-kernels",
                                 description="Download, unpack and check the rig's kernels.")
    ap.add_argument("--kernel", default="all", help=f"{', '.join(SERIES)} or all (default)")
    ap.add_argument("--print-kdir", action="store_true",
                    help="print only the headers folder (KDIR) of each kernel")
    args = ap.parse_args(argv)
    for s in series_list(args.kernel):
        k = fetch(s)
        if args.print_kdir:
            print(k.kdir)
        else:
            print(f"{s}: {k.release}  KDIR={k.kdir}  vmlinuz={k.vmlinuz}")
    return 0


def cmd_run(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vm/run", description=(
        "Boot Debian's stock kernels in QEMU with emulated NVMe and ivshmem "
        "device memory, run the guest suite and judge its report."))
    ap.add_argument("--kernel", default="all", help=f"{', '.join(SERIES)} or all (default)")
    ap.add_argument("--accel", choices=("tcg", "kvm", "auto"),
                    help="default: $PHX_VM_ACCEL, else auto (kvm if a probe boot works)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the disk images and /dev/shm files after the run")
    ap.add_argument("--only", metavar="GLOB",
                    help="passed to the guest as PHX_ONLY (tests to run); "
                         "zero evidence lines are then not a failure")
    ap.add_argument("--entry", default="guest.sh",
                    help="script under /phx/ that /init runs (default guest.sh; demo.sh for scripts/demo)")
    ap.add_argument("--demo", action="store_true", help="same as --entry demo.sh")
    ap.add_argument("--guest", metavar="DIR", help="use a prebuilt guest folder instead of tests/vm/build-guest")
    ap.add_argument("--selftest", action="store_true",
                    help="use the rig's own guest (vm/selftest) to check the rig itself")
    ap.add_argument("--shell", action="store_true",
                    help="boot interactively (console on the terminal), no verdict")
    ap.add_argument("--iommu", action="store_true",
                    default=os.environ.get("PHX_VM_IOMMU", "") not in ("", "0"),
                    help="add an emulated Intel IOMMU (intel_iommu=on, strict); "
                         "default $PHX_VM_IOMMU; work folder and report get -iommu")
    ap.add_argument("--high-bar", action="store_true",
                    help="UEFI machine with one more BAR, 8 GiB at 32 TiB (a GPU's BAR1 sits that "
                         "high); runs highbar.sh; work folder and report get -highbar")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every result")
    args = ap.parse_args(argv)
    if args.high_bar and args.entry == "guest.sh":
        args.entry = "highbar.sh"
    if args.demo:
        args.entry = "demo.sh"
    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.entry):
        raise RigError(f"--entry {args.entry!r}: a file name under /phx/")
    if args.only and not re.fullmatch(r"[A-Za-z0-9._*?\[\]/:,-]+", args.only):
        raise RigError(f"--only {args.only!r}: letters, digits and ._*?[]/:,- only")
    need_tools("qemu-system-x86_64", "mkfs.ext4", "debugfs", "e2fsck")
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    self_check()
    t0 = time.monotonic()
    kernels = [fetch(s) for s in series_list(args.kernel)]
    info(f"kernels ready in {time.monotonic() - t0:.1f}s: {', '.join(k.release for k in kernels)}")
    summaries = []
    for k in kernels:
        try:
            summaries.append(run_kernel(k, args))
        except RigError as e:
            # This kernel could not be run (e.g. the guest did not build):
            # it fails, the next one still runs.
            print(f"vm: error: {e}", file=sys.stderr)
            summary = {"kernel": k.release, "series": k.series, "pass": False,
                       "problems": [str(e).splitlines()[0]]}
            (WORK_ROOT / f"report-{k.release}{variant(args)}.json").write_text(
                json.dumps({**summary, "error": str(e)}, indent=1) + "\n")
            print(f"\n=== {k.release}: FAIL (not run)")
            print(json.dumps(summary, separators=(",", ":")), flush=True)
            summaries.append(summary)
    if args.shell:
        return 0
    failed = [s["kernel"] for s in summaries if not s["pass"]]
    print(f"\nvm: {len(summaries) - len(failed)}/{len(summaries)} kernels passed"
          + (f"; failed: {', '.join(failed)}" if failed else "")
          + f" ({time.monotonic() - t0:.0f}s)")
    return 1 if failed else 0


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("fetch", "run"):
        print("usage: python3 -m phxrig fetch|run [options]  (use vm/fetch-kernels or vm/run)", file=sys.stderr)
        return 2
    try:
        return (cmd_fetch if sys.argv[1] == "fetch" else cmd_run)(sys.argv[2:])
    except RigError as e:
        print(f"vm: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("vm: interrupted", file=sys.stderr)
        return 130
