#!/bin/sh
# hardening.sh - the hardening groups of the guest suite (docs/hardening.md):
# access control (phx-vmtest access) and the fuzzer (fuzz.sh ci).  Run by
# guest.sh, or alone: vm/run --entry hardening.sh --only '*'.
set -u
here=/phx
report=${PHX_REPORT:-/dev/stdout}
failed=0
# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS

result() {
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >>"$report"
	echo "$2 $1 $3"
	[ "$2" = fail ] && failed=1
	return 0
}

if insmod $here/phxfs.ko "pcibar=$1@2,$2@2"; then
	$here/phx-vmtest access || failed=1
	if rmmod phxfs; then
		result access/rmmod_after pass "unload after the access group"
	else
		result access/rmmod_after fail "rmmod phxfs"
	fi
else
	result access/load fail "insmod phxfs pcibar=$1@2,$2@2"
fi

$here/fuzz.sh ci || failed=1
exit $failed
