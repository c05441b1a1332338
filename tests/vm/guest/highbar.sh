#!/bin/sh
# highbar.sh - what vm/run --high-bar runs instead of guest.sh: phxfs on a
# large BAR that UEFI placed tens of TiB up, as a GPU's BAR1 is, on a kernel
# booted with KASLR.  Either phxfs serves it (the read into it is checked
# here and by the host) or loading fails with the message that says why and
# what to do; nothing else passes (an oops ends the run anyway).
set -u
here=/phx
report=${PHX_REPORT:-/dev/stdout}
failed=0

result() {
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >>"$report"
	echo "$2 $1 $3"
	[ "$2" = fail ] && failed=1
	return 0
}

# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS
# The high BAR is the last one behind the switch.
eval high=\${$#}
start=$(sed -n 3p "/sys/bus/pci/devices/$high/resource" | cut -d' ' -f1)
# 16 TiB: a BAR below that is not what this case is about.
if [ $((start)) -lt $((1 << 44)) ]; then
	result highbar/placement fail "firmware put BAR 2 of $high at $start, not tens of TiB up"
	exit 1
fi
result highbar/placement pass "BAR 2 of $high at $start"

# dyndbg: phxfs logs how far this boot's direct map reaches.
if insmod $here/phxfs.ko "pcibar=$high@2" dyndbg=+p 2>/tmp/insmod.err; then
	reach=$(dmesg | grep -o 'the direct map reaches 0x[0-9a-f]*' | tail -n 1)
	result highbar/reach pass "${reach:-the direct map's reach is not logged on this architecture}"
	$here/phx-vmtest highbar || failed=1
	rmmod phxfs || result highbar/rmmod fail "rmmod phxfs"
	# The same BAR as a GPU's BAR1 under the NVIDIA provider (the
	# emulation): a free callback timed while another process walks it.
	if insmod $here/nvemu.ko "bdf=$high"; then
		if insmod $here/phxfs.ko "nvidia=$high@2" nv_api=legacy; then
			$here/phx-vmtest highbar-nvidia || failed=1
			rmmod phxfs || result highbar/rmmod_nvidia fail "rmmod phxfs (nvidia)"
		else
			result highbar/load_nvidia fail "insmod phxfs nvidia=$high@2 nv_api=legacy: $(dmesg | tail -n 2 | tr -d '"\\')"
		fi
		rmmod nvemu || result highbar/rmmod_nvemu fail "rmmod nvemu (it reports leaked pins)"
	else
		result highbar/load_nvemu fail "insmod nvemu bdf=$high"
	fi
elif dmesg | grep -q "lies beyond the kernel's direct map.*nokaslr"; then
	result highbar/load pass "refused at load: $(dmesg | grep -o 'BAR 2 \[.*' | head -n 1 | tr -d '"\\' | cut -c1-160)"
else
	result highbar/load fail "insmod failed without the direct-map message: $(tr -d '"\\' </tmp/insmod.err) $(dmesg | tail -n 3 | tr -d '"\\')"
fi
exit $failed
