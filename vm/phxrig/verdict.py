"""The verdict on one boot: the guest's report protocol, evidence, kernel
log and the ext4 image's fsck."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .evidence import EvidenceChecker
from .kernellog import scan_kernel_log


@dataclass
class Verdict:
    results: list[dict] = field(default_factory=list)     # guest PHX-RESULTs
    evidence: list[dict] = field(default_factory=list)    # host checks of PHX-EVIDENCE
    problems: list[str] = field(default_factory=list)     # everything else that fails
    dmesg_bad: list[str] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)       # PHX-NOTE: information only
    init_started: bool = False                            # PHX-INIT-START: /init ran
    exit_code: int | None = None
    dmesg_lines: int = 0


def died_before_init(work: Path) -> str | None:
    """The first bad console line when the guest kernel panicked before its
    /init started (no PHX-INIT-START on the report port), else None.

    Nothing of ours has run then: /init loads the module.  Under TCG the
    stock kernels now and then die so while they patch their own code (an
    "Oops: int3" in a static-key site on the other vCPU), which is the
    emulator's cross-CPU code modification, not the product."""
    report = work / "report.log"
    text = report.read_bytes()[:1 << 16] if report.is_file() else b""
    if any(ln.startswith(b"PHX-INIT-START") for ln in text.splitlines()):
        return None
    console = work / "console.log"
    clines = console.read_text(errors="replace").splitlines() if console.is_file() else []
    if not any("Kernel panic" in ln for ln in clines):
        return None
    bad = scan_kernel_log(clines)
    return bad[0] if bad else None


def judge(work: Path, shm: list[Path], only: str | None) -> Verdict:
    v = Verdict()
    report = work / "report.log"
    text = report.read_text(errors="replace") if report.is_file() else ""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    checker = EvidenceChecker(work, shm)
    in_dmesg = False
    dmesg: list[str] = []
    saw_end = False
    for ln in lines:
        if in_dmesg:
            if ln == "PHX-DMESG-END":
                in_dmesg, saw_end = False, True
            else:
                dmesg.append(ln)
            continue
        if not ln.strip():
            continue
        tag, _, rest = ln.partition(" ")
        if tag == "PHX-DMESG-BEGIN":
            in_dmesg = True
        elif tag == "PHX-RESULT":
            try:
                r = json.loads(rest)
                if not isinstance(r, dict) or r.get("status") not in ("pass", "fail", "skip") \
                        or not isinstance(r.get("test"), str):
                    raise ValueError("needs test and status pass|fail|skip")
                v.results.append(r)
            except ValueError as e:
                v.problems.append(f"malformed PHX-RESULT ({e}): {ln[:300]}")
        elif tag == "PHX-EVIDENCE":
            try:
                ev = json.loads(rest)
                if not isinstance(ev, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                v.problems.append(f"malformed PHX-EVIDENCE ({e}): {ln[:300]}")
                continue
            ok, detail = checker.check(ev)
            v.evidence.append({"test": f"host:evidence:{ev.get('test', len(v.evidence))}",
                               "status": "pass" if ok else "fail", "detail": detail, "claim": ev})
        elif tag == "PHX-EXIT":
            try:
                v.exit_code = int(rest)
            except ValueError:
                v.problems.append(f"malformed PHX-EXIT: {ln}")
        elif tag == "PHX-INIT-START":
            v.init_started = True
        elif tag in ("PHX-INIT",):
            v.init_lines.append(rest)
        elif tag == "PHX-NOTE":
            v.notes.append(rest)
        elif tag == "PHX-INIT-ERROR":
            v.problems.append(f"guest init: {rest}")
        elif tag.startswith("PHX-"):
            v.problems.append(f"unknown protocol line: {ln[:300]}")
        # Other lines on the report port are free text; they stay in report.log.
    v.dmesg_lines = len(dmesg)
    if v.exit_code is None:
        v.problems.append("no PHX-EXIT: the guest did not finish (timeout, panic or hang)")
    elif v.exit_code != 0:
        v.problems.append(f"guest entry exited with {v.exit_code}")
    if dmesg and not saw_end:
        v.problems.append("dmesg dump truncated (no PHX-DMESG-END)")
    if not dmesg:
        # No dump (panic, timeout): judge what reached the console instead.
        console = work / "console.log"
        clines = console.read_text(errors="replace").splitlines() if console.is_file() else []
        # Backtraces the host asked a hung guest for are not findings.
        cut = next((i for i, ln in enumerate(clines) if "sysrq: Changing Loglevel" in ln), None)
        v.dmesg_bad = scan_kernel_log(clines[:cut])
    else:
        v.dmesg_bad = scan_kernel_log(dmesg)
    if v.dmesg_bad:
        v.problems.append(f"kernel log has {len(v.dmesg_bad)} bad line(s)")
    if not v.results:
        v.problems.append("no PHX-RESULT lines")
    if not v.evidence and not only:
        v.problems.append("no PHX-EVIDENCE lines (nothing shows that NVMe DMA reached device memory)")
    if any(r["status"] == "fail" for r in v.results):
        v.problems.append("guest tests failed")
    if any(e["status"] == "fail" for e in v.evidence):
        v.problems.append("evidence mismatch")
    return v


def e2fsck(work: Path) -> dict:
    proc = subprocess.run(["e2fsck", "-fn", str(work / "ext4.img")], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ok = proc.returncode == 0
    detail = "clean" if ok else f"exit {proc.returncode}: " + " | ".join(proc.stdout.splitlines()[-6:])
    return {"test": "host:e2fsck", "status": "pass" if ok else "fail", "detail": detail}
