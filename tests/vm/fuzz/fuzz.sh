#!/bin/sh
# fuzz.sh [ci|soak] - the fuzz group of the guest suite (also a rig entry:
# vm/run --entry fuzz.sh, vm/soak).  Loads phxfs on every ivshmem device,
# runs phx-fuzz on devices 4-7 above 1 MiB (the many-devices group's
# evidence lies below), then checks that the module unloads and reloads.
#   ci:   the regression seeds of fuzz-seeds.txt, then one fresh seed for
#         PHX_FUZZ_DURATION seconds (default 20);
#   soak: consecutive seeds from PHX_FUZZ_SEED, PHX_FUZZ_SLICE seconds each
#         (default 30), until PHX_FUZZ_DURATION seconds have passed.
# The PHX_FUZZ_* variables may come from the rig's /etc/phx/config
# (vm/run's PHX_VM_GUEST_VARS).  Exit status 0 only when all passed.
set -u
here=/phx
report=${PHX_REPORT:-/dev/stdout}
# shellcheck source=/dev/null
[ -r /etc/phx/config ] && . /etc/phx/config
mode=${1:-${PHX_FUZZ_MODE:-ci}}
duration=${PHX_FUZZ_DURATION:-20}
failed=0

result() {
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >>"$report"
	echo "$2 $1 $3"
	[ "$2" = fail ] && failed=1
	return 0
}

# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS
if [ $# -lt 8 ]; then
	result fuzz/setup skip "the rig provided $# ivshmem devices (8 needed)"
	exit 0
fi
all=""
for bdf in "$@"; do
	all="$all${all:+,}$bdf@2"
done
if ! insmod $here/phxfs.ko "pcibar=$all"; then
	result fuzz/load fail "insmod phxfs pcibar=$all"
	exit 1
fi

fuzz() {
	# fuzz NAME SEED SECONDS PROCS THREADS
	$here/phx-fuzz --name "$1" --seed "$2" --duration "$3" --procs "$4" --threads "$5" \
		--devices 4,5,6,7 --window-lo 1048576 || failed=1
}

case $mode in
ci)
	while read -r seed secs procs threads; do
		case $seed in '' | '#'*) continue ;; esac
		fuzz "fuzz/regress-$seed" "$seed" "$secs" "$procs" "$threads"
	done <$here/fuzz-seeds.txt
	seed=${PHX_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
	fuzz fuzz/random "$seed" "$duration" 2 3
	;;
soak)
	seed=${PHX_FUZZ_SEED:-1}
	slice=${PHX_FUZZ_SLICE:-30}
	start=$(cut -d. -f1 /proc/uptime)
	first=$seed
	while [ $(($(cut -d. -f1 /proc/uptime) - start)) -lt "$duration" ] && [ $failed = 0 ]; do
		fuzz "fuzz/soak-$seed" "$seed" "$slice" $((2 + seed % 3)) $((2 + seed % 4))
		seed=$((seed + 1))
	done
	echo "PHX-NOTE fuzz soak seeds $first..$((seed - 1))" >>"$report"
	;;
*)
	result fuzz/setup fail "unknown mode $mode"
	;;
esac

if rmmod phxfs; then
	result fuzz/rmmod_after pass "phxfs unloads after the fuzz run"
	if insmod $here/phxfs.ko "pcibar=$all" && rmmod phxfs; then
		result fuzz/reload pass "phxfs loads and unloads again"
	else
		result fuzz/reload fail "reload after the fuzz run"
	fi
else
	result fuzz/rmmod_after fail "rmmod phxfs after the fuzz run: $(lsmod | grep phxfs | tr -d '\"\\')"
fi
exit $failed
