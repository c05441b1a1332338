"""One kernel's run: guest build, initramfs and disks, ivshmem files, boot,
verdict, the report file and the printed summary."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .boot import boot
from .common import RigError, info
from .config import (EXT4_MIB, EXT4_SERIAL, NSHM, RAW_MIB, RAW_SERIAL, REPO, SHM_SIZES_MIB,
                     VM_DIR, WORK_ROOT)
from .firmware import fetch_ovmf
from .images import make_ext4_image, make_raw_image
from .initramfs import build_initramfs, check_guest_dir
from .kernels import Kernel
from .qemu import kvm_usable, qemu_command
from .userland import prepare_userland, selected_tools
from .verdict import died_before_init, e2fsck, judge


def prepare_guest(k: Kernel, work: Path, args) -> Path:
    if args.guest:
        guest = Path(args.guest).resolve()
        if not guest.is_dir():
            raise RigError(f"--guest {guest}: not a folder")
        return guest
    if args.selftest:
        return VM_DIR / "selftest"
    script = REPO / "tests/vm/build-guest"
    if not script.is_file():
        raise RigError(f"{script.relative_to(REPO)} does not exist yet "
                       "(use --selftest for the rig's own guest, or --guest DIR)")
    out = work / "guest"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    info(f"[{k.release}] tests/vm/build-guest {k.kdir} {out.relative_to(REPO)}")
    log = work / "build-guest.log"
    env = dict(os.environ)
    if k.buildroot:
        env["PHX_KBUILD_CHROOT"] = str(k.buildroot)
    with open(log, "w") as f:
        proc = subprocess.run([str(script), str(k.kdir), str(out)], cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RigError(f"tests/vm/build-guest failed for {k.release} (exit {proc.returncode}), "
                       f"log {log}:\n{tail}")
    info(f"[{k.release}] guest built in {time.monotonic() - t0:.1f}s")
    return out


def choose_accel(args, k: Kernel, work: Path) -> tuple[str, str]:
    want = args.accel or os.environ.get("PHX_VM_ACCEL") or "auto"
    if want in ("tcg", "kvm"):
        return want, "requested"
    if want != "auto":
        raise RigError(f"accel {want!r}: use tcg, kvm or auto")
    ok, why = kvm_usable(k, work)
    return ("kvm" if ok else "tcg"), f"auto: kvm {'works' if ok else 'unusable'} ({why})"


def env_mib(name: str, default: int) -> int:
    val = os.environ.get(name) or str(default)
    if not val.isdigit() or not 16 <= int(val) <= 65536:
        raise RigError(f"{name}={val!r}: a size in MiB from 16 to 65536")
    return int(val)


def variant(args) -> str:
    """Suffix of work folders and reports for non-default machines."""
    return ("-iommu" if args.iommu else "") + ("-highbar" if args.high_bar else "")


def guest_vars() -> dict[str, str]:
    """PHX_VM_GUEST_VARS="PHX_A=1 PHX_B=x": extra /etc/phx/config entries (vm/soak's knobs)."""
    out = {}
    for item in os.environ.get("PHX_VM_GUEST_VARS", "").split():
        key, eq, val = item.partition("=")
        if not eq or not re.fullmatch(r"PHX_[A-Z0-9_]+", key):
            raise RigError(f"PHX_VM_GUEST_VARS: {item!r} is not PHX_NAME=VALUE")
        out[key] = val
    return out


def boot_until_init(k: Kernel, cmd: list[str], work: Path, accel: str, timeout: float,
                    ready_timeout: float, monitor: Path | None,
                    uefi_template: Path | None) -> tuple:
    """Boots; boots again (PHX_VM_BOOT_RETRIES times, default 1) when the
    guest kernel died before its /init started, so before anything of ours
    ran.  Returns the last boot and each earlier attempt's cause; the
    earlier attempts' logs stay as *-attempt<n>.log."""
    retries: list[str] = []
    allowed = int(os.environ.get("PHX_VM_BOOT_RETRIES") or 1)
    while True:
        b = boot(cmd, work, accel, timeout, ready_timeout, monitor)
        why = None if b.timed_out else died_before_init(work)
        if why is None or len(retries) >= allowed:
            return b, retries
        retries.append(why)
        n = len(retries)
        info(f"[{k.release}] the guest kernel died before /init started ({why.strip()}); "
             f"booting again ({n} of {allowed})")
        for name in ("console", "report", "qemu"):
            with contextlib.suppress(FileNotFoundError):
                (work / f"{name}.log").rename(work / f"{name}-attempt{n}.log")
        if uefi_template is not None:
            shutil.copyfile(uefi_template, work / "ovmf-vars.fd")


def run_kernel(k: Kernel, args) -> dict:
    work = WORK_ROOT / (k.release + variant(args))
    work.mkdir(parents=True, exist_ok=True)
    # One run per kernel at a time: the work folder holds its images.
    with open(work / ".lock", "w") as lk:
        try:
            fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info(f"[{k.release}] waiting for another vm/run using {work}")
            fcntl.flock(lk, fcntl.LOCK_EX)
        return run_kernel_locked(k, args, work)


def run_kernel_locked(k: Kernel, args, work: Path) -> dict:
    # build/vm/<series> -> <release>: a stable path for scripts.
    alias = WORK_ROOT / (k.series + variant(args))
    if alias.is_symlink() or not alias.exists():
        with contextlib.suppress(FileNotFoundError):
            alias.unlink()
        alias.symlink_to(work.name)
    for name in ("console.log", "report.log", "qemu.log", "raw.img", "ext4.img"):
        with contextlib.suppress(FileNotFoundError):
            (work / name).unlink()
    for p in work.glob("*-attempt*.log"):
        p.unlink()
    shutil.rmtree(work / "extract", ignore_errors=True)
    accel, why = choose_accel(args, k, work)
    guest = prepare_guest(k, work, args)
    entry = "shell" if args.shell else args.entry
    if not args.shell:
        check_guest_dir(guest, entry)
    t0 = time.monotonic()
    initrd = work / "initramfs.cpio"
    userland = prepare_userland()
    (work / "guest-userland.json").write_text(json.dumps(
        userland.origin if userland else {}, indent=1, sort_keys=True) + "\n")
    build_initramfs(k, guest, initrd, {
        "PHX_ENTRY": args.entry, "PHX_ONLY": args.only or "", "PHX_WAIT_S": "60",
        "PHX_RAW_SERIAL": RAW_SERIAL, "PHX_EXT4_SERIAL": EXT4_SERIAL,
        "PHX_NSHM": str(NSHM + (1 if args.high_bar else 0)),
        "PHX_HIGH_BAR": "1" if args.high_bar else "",
        "PHX_MODE": "shell" if args.shell else "run",
        "PHX_TOOLS": " ".join(t.path for t in (selected_tools() if userland else []) if t.path),
        **guest_vars()}, userland)
    make_raw_image(work / "raw.img", env_mib("PHX_VM_RAW_MIB", RAW_MIB))
    make_ext4_image(work / "ext4.img", env_mib("PHX_VM_EXT4_MIB", EXT4_MIB))
    tag = f"{os.getpid()}-{re.sub(r'[^A-Za-z0-9.]', '_', k.release)}"
    shm_dir = Path(os.environ.get("PHX_VM_SHM_DIR") or "/dev/shm")
    shm = [shm_dir / f"phx-{tag}-shm{i}"
           for i in range(len(SHM_SIZES_MIB) + (1 if args.high_bar else 0))]
    # Device memory files of runs that were killed (their pid is gone).
    for p in shm_dir.glob("phx-*-shm*"):
        m = re.fullmatch(r"phx-(\d+)-.*-shm\d+", p.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    try:
        st = os.statvfs(shm_dir)
    except OSError as e:
        raise RigError(f"ivshmem backing folder {shm_dir}: {e} (set PHX_VM_SHM_DIR)") from e
    free_mib = st.f_bavail * st.f_frsize >> 20
    if free_mib < sum(SHM_SIZES_MIB) + 64:
        raise RigError(f"{shm_dir} has {free_mib} MiB free; the ivshmem files need "
                       f"{sum(SHM_SIZES_MIB)} MiB (a container's /dev/shm is often 64 MiB: "
                       "enlarge it or set PHX_VM_SHM_DIR to another folder)")
    prep_s = time.monotonic() - t0
    timeout = float(os.environ.get("PHX_VM_TIMEOUT") or (600 if accel == "tcg" else 300))
    ready_timeout = min(timeout, float(os.environ.get("PHX_VM_READY_TIMEOUT")
                                       or (120 if accel == "tcg" else 60)))
    # Unix socket paths are short (108 bytes): the monitor lives in /tmp.
    mon_dir = Path(tempfile.mkdtemp(prefix="phx-vm-"))
    monitor = mon_dir / "monitor.sock"
    uefi = template = None
    if args.high_bar:
        code, template = fetch_ovmf()
        shutil.copyfile(template, work / "ovmf-vars.fd")
        uefi = (code, work / "ovmf-vars.fd")
    cmd = qemu_command(k, work, accel, initrd, shm, args.shell, args.iommu,
                       None if args.shell else monitor, uefi)
    (work / "qemu-cmd.sh").write_text(shlex.join(cmd) + "\n")
    info(f"[{k.release}] booting ({accel}, {why}; prep {prep_s:.1f}s, timeout {timeout:.0f}s)")
    try:
        if args.shell:
            subprocess.run(cmd)
            return {"kernel": k.release, "pass": True, "shell": True}
        b, retries = boot_until_init(k, cmd, work, accel, timeout, ready_timeout, monitor,
                                     uefi_template=template if uefi else None)
        v = judge(work, shm, args.only)
        host_results = list(v.evidence)
        if (work / "ext4.img").is_file() and v.exit_code is not None:
            host_results.append(e2fsck(work))
    finally:
        shutil.rmtree(mon_dir, ignore_errors=True)
        for i, p in enumerate(shm):
            with contextlib.suppress(FileNotFoundError):
                if args.keep:
                    # One kept set per kernel, replaced by the next --keep run.
                    kept = shm_dir / f"phx-kept-{work.name.replace('+', '_')}-shm{i}"
                    p.rename(kept)
                    info(f"[{k.release}] kept ivshmem #{i} as {kept}")
                else:
                    p.unlink()
    if b.stalled:
        v.problems.insert(0, f"QEMU killed: the guest's /init was not ready after {ready_timeout:.0f}s"
                          + (" (KVM here may not work: try --accel tcg)" if accel == "kvm" else ""))
    elif b.timed_out:
        v.problems.insert(0, f"QEMU killed after the {timeout:.0f}s timeout "
                          "(blocked tasks and CPU backtraces requested first: see the console log)")
    elif b.qemu_rc not in (0, None):
        v.problems.append(f"QEMU exited with {b.qemu_rc}: {b.qemu_out.strip()[-500:]}")
    if any(r["status"] == "fail" for r in host_results) and "evidence mismatch" not in v.problems:
        v.problems.append("host-side checks failed")
    for ln in v.init_lines:
        m = re.search(r"uptime=([\d.]+)", ln)
        if m:
            b.init_s = float(m.group(1))
    all_results = v.results + host_results
    guest_counts = {s: sum(1 for r in v.results if r["status"] == s) for s in ("pass", "fail", "skip")}
    ok = not v.problems
    summary = {
        "kernel": k.release, "series": k.series, "accel": accel, "iommu": args.iommu,
        "high_bar": args.high_bar,
        "boot_s": None if b.ready_s is None else round(b.ready_s, 1),
        "run_s": round(b.wall_s, 1), "guest_uptime_ready_s": b.init_s, "prep_s": round(prep_s, 1),
        "results": guest_counts, "host_checks": {s: sum(1 for r in host_results if r["status"] == s)
                                                 for s in ("pass", "fail")},
        "evidence": {"lines": len(v.evidence),
                     "verified": sum(1 for e in v.evidence if e["status"] == "pass")},
        "dmesg": {"lines": v.dmesg_lines, "bad": len(v.dmesg_bad),
                  "verdict": ("clean" if not v.dmesg_bad else "bad")
                  + ("" if v.dmesg_lines else " (no dump: console log scanned)")},
        "exit": v.exit_code, "timed_out": b.timed_out, "boot_retries": retries, "pass": ok,
        "problems": v.problems,
    }
    report = {**summary, "results_detail": all_results, "notes": v.notes,
              "dmesg_bad_lines": v.dmesg_bad,
              "qemu_cmd": cmd, "work": str(work), "entry": args.entry, "only": args.only}
    (WORK_ROOT / f"report-{k.release}{variant(args)}.json").write_text(json.dumps(report, indent=1) + "\n")

    # Human summary.
    ready = "never" if b.ready_s is None else f"{b.ready_s:.1f}s"
    extra = (", iommu" if args.iommu else "") + (", high BAR" if args.high_bar else "")
    print(f"\n=== {k.release} ({accel}{extra}): {'PASS' if ok else 'FAIL'}  "
          f"QEMU {b.wall_s:.1f}s (guest ready after {ready}, uptime {b.init_s if b.init_s is not None else '-'}s)")
    print(f"    guest results: {guest_counts['pass']} pass, {guest_counts['fail']} fail, "
          f"{guest_counts['skip']} skip; evidence {summary['evidence']['verified']}/"
          f"{len(v.evidence)} verified; dmesg {summary['dmesg']['verdict']}")
    for r in all_results:
        if r["status"] == "fail" or args.verbose:
            print(f"    {r['status'].upper():4} {r['test']}: {r.get('detail', '')}")
    if args.verbose:
        for n in v.notes:
            print(f"    note: {n}")
    for i, why in enumerate(retries, 1):
        print(f"    booted again: attempt {i}'s kernel died before /init started: {why.strip()} "
              f"(its logs: {{console,report,qemu}}-attempt{i}.log)")
    for p in v.problems:
        print(f"    problem: {p}")
    if v.dmesg_bad:
        print("    offending kernel log lines:")
        for ln in v.dmesg_bad[:60]:
            print(f"      {ln}")
    if v.exit_code is None:
        console = work / "console.log"
        tail = console.read_text(errors="replace").splitlines()[-100:] if console.is_file() else []
        print(f"    console tail ({console}):")
        for ln in tail:
            print(f"      {ln}")
    if not ok:
        print(f"    logs: {work.relative_to(REPO)}/{{console,report,qemu}}.log; "
              f"report: {(WORK_ROOT / f'report-{k.release}{variant(args)}.json').relative_to(REPO)}")
    if not args.keep:
        for name in ("raw.img", "ext4.img"):
            with contextlib.suppress(FileNotFoundError):
                (work / name).unlink()
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return summary
