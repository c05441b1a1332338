#!/bin/sh
# fault.sh - the fault suite of the guest suite (docs/hardening.md, "Fault
# injection"), run by guest.sh on every kernel, or alone:
#   vm/run --kernel 6.1 --entry fault.sh --only 'fault/*'
# Steps, each loading the modules it needs:
#   fault/crash_direct      writer SIGKILLed mid-way, direct engine (phx-fault-lib-test)
#   fault/device_mapper     reads and writes failing mid-transfer on dm error/flakey
#   fault/memory_pressure   registrations while a hog holds all but 64 MiB
#   fault/free_during_io_*  nvemu cudaFree (free callback) under concurrent I/O
#   fault/nvme_removed_while_mapped  the raw NVMe pulled (sysfs remove) under
#                           reads into mapped device memory, then rescanned
# PHX_FAULT_SEED (from /etc/phx/config, vm/run's PHX_VM_GUEST_VARS) fixes
# the seed of the random steps; otherwise a fresh one is drawn and reported.
set -u
here=/phx
report=${PHX_REPORT:-/dev/stdout}
# shellcheck source=/dev/null
[ -r /etc/phx/config ] && . /etc/phx/config
failed=0
seed=${PHX_FAULT_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}

result() {
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >>"$report"
	echo "$2 $1 $3"
	[ "$2" = fail ] && failed=1
	return 0
}

# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS
if [ $# -lt 8 ]; then
	result fault/setup skip "the rig provided $# ivshmem devices (8 needed)"
	exit 0
fi
bdf3=$4
all=""
for bdf in "$@"; do
	all="$all${all:+,}$bdf@2"
done

# gtest NAME FILTER: one result for a gtest suite of phx-fault-lib-test.
gtest() {
	if $here/phx-fault-lib-test --gtest_filter="$2" >/tmp/fault-$$.log 2>&1; then
		if grep -q '^\[  SKIPPED \]' /tmp/fault-$$.log; then
			result "$1" fail "skipped: $(grep -A1 'Skipped' /tmp/fault-$$.log | tail -n 1 | tr -d '"\\')"
		else
			result "$1" pass "$(grep -E 'kills left|flakey:|error target:|PASSED' /tmp/fault-$$.log | tr -d '"\\' | tr '\n' ' ')"
		fi
	else
		result "$1" fail "$(grep -E 'Failure|FAILED|Expected|Which is|differ' /tmp/fault-$$.log | head -n 6 | tr -d '"\\' | tr '\n' ' ')"
		cat /tmp/fault-$$.log
	fi
}

# --- device-mapper targets over the raw disk's [200, 232) MiB -----------------
# (read only: writes go to flakey targets that drop them)
mib=2048 # sectors
dm_ok=0
if command -v dmsetup >/dev/null && modprobe dm-mod && modprobe dm-flakey; then
	raw=$PHX_RAW_DEV
	# linear | error | linear
	if printf '%s\n' "0 $((8 * mib)) linear $raw $((200 * mib))" \
		"$((8 * mib)) $mib error" \
		"$((9 * mib)) $((8 * mib)) linear $raw $((208 * mib))" |
		dmsetup --noudevsync create phx-error &&
		# the same with write-dropping flakey targets that are never up
		printf '%s\n' "0 $((8 * mib)) flakey $raw $((200 * mib)) 0 1000 1 drop_writes" \
			"$((8 * mib)) $mib error" \
			"$((9 * mib)) $((8 * mib)) flakey $raw $((208 * mib)) 0 1000 1 drop_writes" |
		dmsetup --noudevsync create phx-discard &&
		echo "0 $((16 * mib)) flakey $raw $((216 * mib)) 1 1" |
		dmsetup --noudevsync create phx-flakey &&
		dmsetup mknodes; then
		dm_ok=1
	else
		result fault/device_mapper_setup fail "dmsetup create: $(dmsetup ls 2>&1 | tr -d '"\\' | tr '\n' ' ')"
	fi
else
	result fault/device_mapper_setup fail "no dmsetup or dm-mod/dm-flakey in the guest (GUEST_TOOLS in vm/phxrig/userland.py, GUEST_ON_DEMAND_MODULES in vm/phxrig/config.py)"
fi

# --- PCI BAR provider on every device: libphoenix and memory pressure ---------
if insmod $here/phxfs.ko "pcibar=$all"; then
	gtest fault/crash_direct '*CrashDirect.*'
	if [ $dm_ok = 1 ]; then
		PHX_DM_ERROR=/dev/mapper/phx-error PHX_DM_DISCARD=/dev/mapper/phx-discard \
			PHX_DM_FLAKEY=/dev/mapper/phx-flakey gtest fault/device_mapper 'DeviceMapper.*'
	fi
	$here/phx-fault mem-pressure "${PHX_FAULT_PRESSURE_S:-15}" "$seed" || failed=1
	if rmmod phxfs; then
		result fault/rmmod_after_pcibar pass "phxfs unloads after the pcibar steps"
	else
		result fault/rmmod_after_pcibar fail "rmmod phxfs: $(lsmod | grep phxfs | tr -d '"\\')"
	fi
else
	result fault/load_pcibar fail "insmod phxfs pcibar=$all"
fi
if [ $dm_ok = 1 ]; then
	if ! dmsetup --noudevsync remove phx-error || ! dmsetup --noudevsync remove phx-discard ||
		! dmsetup --noudevsync remove phx-flakey; then
		result fault/device_mapper_teardown fail "dmsetup remove: $(dmsetup ls 2>&1 | tr -d '"\\' | tr '\n' ' ')"
	fi
fi

# --- NVIDIA provider over nvemu on ivshmem #3, BAR bytes [1, 4) MiB -------------
if insmod $here/nvemu.ko "bdf=$bdf3" offset=1048576; then
	# legacy-deregister-race: DEREGISTER racing cudaFree's callback, the
	# regression test of finding 7 (docs/hardening.md).
	# legacy-deregister-reuse: the same with freed GPU memory and page
	# tables handed out again at once and put_pages entered late (finding 8).
	modes="legacy persistent legacy-deregister-race legacy-deregister-reuse"
	nvparams=/sys/module/nvemu/parameters
	for api in $modes; do
		arg=""
		[ $api != persistent ] && arg=nv_api=legacy
		if [ $api = legacy-deregister-reuse ]; then
			echo Y >$nvparams/reuse
			echo 3000 >$nvparams/put_delay_us
		fi
		# shellcheck disable=SC2086
		if insmod $here/phxfs.ko "nvidia=$bdf3@2" $arg; then
			$here/phx-fault free-callback $api 0 "${PHX_FAULT_FREE_S:-10}" "$seed" || failed=1
			rmmod phxfs || result "fault/rmmod_after_free_$api" fail "rmmod phxfs"
		else
			result "fault/free_during_io_$api" fail "insmod phxfs nvidia=$bdf3@2 $arg"
		fi
		echo N >$nvparams/reuse
		echo 0 >$nvparams/put_delay_us
	done
	if rmmod nvemu; then
		result fault/rmmod_nvemu pass "nvemu unloads: no pin or allocation left"
	else
		result fault/rmmod_nvemu fail "rmmod nvemu"
	fi
else
	result fault/load_nvemu fail "insmod nvemu bdf=$bdf3 offset=1048576"
fi
# --- the raw NVMe removed while device memory is mapped and read into ----------
# (last: the controller is rescanned and must come back as $PHX_RAW_DEV for
# the groups after this one)
raw_name=${PHX_RAW_DEV#/dev/}
raw_bdf=$(basename "$(readlink -f "/sys/block/$raw_name/device/device")")
raw_serial=$(tr -d ' ' <"/sys/block/$raw_name/device/serial" 2>/dev/null)
if insmod $here/phxfs.ko "pcibar=$all"; then
	$here/phx-fault nvme-remove "$raw_bdf" || failed=1
	rmmod phxfs || result fault/rmmod_after_nvme_remove fail "rmmod phxfs"
else
	result fault/load_pcibar_remove fail "insmod phxfs pcibar=$all"
fi
echo 1 >/sys/bus/pci/rescan
back=""
for _ in $(seq 60); do
	if [ -b "$PHX_RAW_DEV" ] &&
		[ "$(tr -d ' ' <"/sys/block/$raw_name/device/serial" 2>/dev/null)" = "$raw_serial" ]; then
		back=yes
		break
	fi
	sleep 0.5
done
if [ -n "$back" ] && dd if="$PHX_RAW_DEV" of=/dev/null bs=1M count=4 iflag=direct 2>/dev/null; then
	result fault/nvme_rescan pass "$raw_bdf rescanned: $PHX_RAW_DEV (serial $raw_serial) is back and reads"
else
	result fault/nvme_rescan fail "$raw_bdf rescanned, but $PHX_RAW_DEV (serial $raw_serial) did not come back readable"
fi

rm -f /tmp/fault-$$.log
exit $failed
