#!/bin/sh
# guest.sh - the guest suite, run by the rig's /init inside the VM.
# Environment (from /init): PHX_RAW_DEV, PHX_EXT4_DIR, PHX_PCIBAR_BDFS (the
# two ivshmem devices, PCI order), PHX_KERNEL, PHX_REPORT.  Loads the
# modules each group needs, runs phx-vmtest, and reports every step in the
# rig's protocol.  Exit status 0 only when everything passed.
set -u
here=/phx
vmtest=$here/phx-vmtest
report=${PHX_REPORT:-/dev/stdout}
failed=0

# --only 'remote/*' (vm/run): the remote-storage group alone.
case "${PHX_ONLY:-}" in
remote/*) exec $here/remote.sh ;;
esac

# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS
if [ $# -lt 2 ]; then
	echo 'PHX-RESULT {"test":"guest/setup","status":"fail","detail":"two ivshmem devices expected"}' >>"$report"
	exit 1
fi
bdf0=$1
bdf1=$2

result() {
	# $1 test, $2 pass|fail|skip, $3 detail (no quotes or backslashes)
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >>"$report"
	echo "$2 $1 $3"
	[ "$2" = fail ] && failed=1
	return 0
}

check() {
	# check NAME DETAIL COMMAND...: pass when COMMAND succeeds
	name=$1
	detail=$2
	shift 2
	if out=$("$@" 2>&1); then
		result "$name" pass "$detail"
	else
		result "$name" fail "$detail: $(echo "$out" | tr -d '"\\' | tail -c 200)"
	fi
}

load_pcibar() {
	insmod $here/phxfs.ko "pcibar=$bdf0@2,$bdf1@2" "$@"
}

# libphoenix-cufile's C client over the direct engine (tests/vm/cufile): no
# CUDA; its device pointers are offsets into dev0's BAR.
cufile_case() {
	if ! load_pcibar; then
		result cufile/client_direct fail "insmod phxfs pcibar=$bdf0@2,$bdf1@2"
		return
	fi
	if $here/phx-cufile-test >/tmp/cufile.log 2>&1; then
		skipped=$(grep '^SKIP' /tmp/cufile.log | tr -d '"\\' | tr '\n' ' ')
		result cufile/client_direct pass "$(tail -n 1 /tmp/cufile.log | tr -d '"\\')${skipped:+; $skipped}"
	else
		result cufile/client_direct fail "$(grep -E 'failed|rror' /tmp/cufile.log | head -n 3 | tr -d '"\\' | tr '\n' ' ')"
		cat /tmp/cufile.log
	fi
	rmmod phxfs
}
# --only 'cufile/*' (vm/run): that case alone.
case "${PHX_ONLY:-}" in
cufile/*)
	cufile_case
	exit $failed
	;;
esac

# The NVIDIA provider over the emulation (nvemu): load order, then the
# suite per pinning API.
nvidia_suite() {
	# phxfs first, NVIDIA driver later: must report and then pick it up.
	if insmod $here/phxfs.ko "nvidia=$bdf0@2" "pcibar=$bdf1@2"; then
		$vmtest nvidia missing || failed=1
		if insmod $here/nvemu.ko "bdf=$bdf0" offset=134217728; then
			$vmtest nvidia appeared || failed=1
		else
			result nvidia/load_nvemu fail "insmod nvemu"
		fi
		check module/rmmod_nvidia_phxfs "unload phxfs (nvidia)" rmmod phxfs
	else
		result nvidia/load fail "insmod phxfs nvidia=$bdf0@2"
	fi

	# phxfs over the emulation with the module parameters after $1, the suite
	# in mode $1, then unloaded.
	nvidia_mode() {
		nv_mode=$1
		shift
		if insmod $here/phxfs.ko "nvidia=$bdf0@2" "pcibar=$bdf1@2" "$@"; then
			$vmtest nvidia $nv_mode || failed=1
			rmmod phxfs || result module/rmmod_$nv_mode fail "rmmod phxfs"
		else
			result nvidia/load_$nv_mode fail "insmod $*"
		fi
	}

	if [ -c /dev/nvemu ]; then
		nvidia_mode persistent
		nvidia_mode legacy nv_api=legacy
		# A GPU shared as MIG or vGPU refuses persistent pins: REGISTER must
		# refuse too, and take legacy pins only when nv_api=legacy says so.
		echo 1 >/sys/module/nvemu/parameters/refuse_persistent
		nvidia_mode refused
		nvidia_mode refused_legacy nv_api=legacy
		echo 0 >/sys/module/nvemu/parameters/refuse_persistent
		check module/rmmod_nvemu "unload the emulation (it reports leaked pins)" rmmod nvemu
	fi
}
# Caps per user and the administrator's listing, with pcibar on two devices.
limits_suite() {
	if load_pcibar; then
		$vmtest limits || failed=1
		check module/rmmod_after_limits "unload after the limits group" rmmod phxfs
	else
		result limits/load fail "insmod phxfs pcibar=$bdf0@2,$bdf1@2"
	fi
}

# --only 'nvidia/*' or 'limits/*' (vm/run): that group alone.
case "${PHX_ONLY:-}" in
nvidia/*)
	nvidia_suite
	exit $failed
	;;
limits/*)
	limits_suite
	exit $failed
	;;
esac

# --- module lifecycle -------------------------------------------------------
meminfo_kb() {
	# meminfo_kb FIELD: after dropping caches, so only real allocations count
	sync
	echo 3 >/proc/sys/vm/drop_caches
	awk -v f="$1:" '$1 == f { print $2 }' /proc/meminfo
}

cycles=0
free_before=0
slab_before=0
while [ $cycles -lt 100 ]; do
	load_pcibar || break
	[ -c /dev/phxfs_dev0 ] && [ -c /dev/phxfs_dev1 ] || break
	rmmod phxfs || break
	cycles=$((cycles + 1))
	if [ $cycles -eq 10 ]; then
		free_before=$(meminfo_kb MemFree)
		slab_before=$(meminfo_kb Slab)
	fi
done
free_after=$(meminfo_kb MemFree)
slab_after=$(meminfo_kb Slab)
# Cycles 10..100 measured: a leak of the BARs' struct pages (8 MiB a load)
# would cost over 700 MiB, of any slab object per cycle at least 90 objects;
# MemFree itself wanders by about 10 MiB in the idle guest.
lost_kb=$((free_before - free_after))
slab_kb=$((slab_after - slab_before))
if [ $cycles -eq 100 ] && [ $lost_kb -lt 65536 ] && [ $slab_kb -lt 128 ]; then
	result module/load_unload_100 pass "100 load/unload cycles, both nodes each time; over cycles 10-100 MemFree delta $((-lost_kb)) KiB, Slab delta ${slab_kb} KiB"
elif [ $cycles -eq 100 ]; then
	result module/load_unload_100 fail "over cycles 10-100 MemFree fell by ${lost_kb} KiB, Slab grew by ${slab_kb} KiB"
else
	result module/load_unload_100 fail "cycle $cycles failed"
	rmmod phxfs 2>/dev/null
fi

load_pcibar dev_gid=42 dev_mode=0640
mode=$(stat -c '%a %g' /dev/phxfs_dev0 2>/dev/null)
if [ "$mode" = "640 42" ]; then
	result module/node_mode_and_group pass "dev_mode=0640 dev_gid=42 gave $mode"
else
	result module/node_mode_and_group fail "got '$mode'"
fi
exec 3<>/dev/phxfs_dev0
if rmmod phxfs 2>/dev/null; then
	result module/rmmod_while_open fail "rmmod succeeded with /dev/phxfs_dev0 open"
else
	result module/rmmod_while_open pass "rmmod refused while a file is open"
fi
exec 3>&-
check module/rmmod_after_close "rmmod once the file is closed" rmmod phxfs
mode=$(load_pcibar && stat -c '%a' /dev/phxfs_dev0; rmmod phxfs)
[ "$mode" = 660 ] && result module/node_default_mode pass "0660" || result module/node_default_mode fail "got '$mode'"

if insmod $here/phxfs.ko "pcibar=0000:00:00.0" 2>/dev/null; then
	rmmod phxfs
	result module/bad_parameter fail "pcibar without @BAR accepted"
else
	result module/bad_parameter pass "pcibar without @BAR refused"
fi

# --- PCI BAR provider ---------------------------------------------------------
if load_pcibar; then
	$vmtest pcibar || failed=1
	check module/rmmod_after_pcibar "unload after the pcibar group" rmmod phxfs
else
	result pcibar/load fail "insmod phxfs pcibar=$bdf0@2,$bdf1@2"
fi

# --- caps per user and the administrator's listing ----------------------------
limits_suite

# --- every device the rig has (at least 8 when it provides them) -------------
if [ $# -ge 8 ]; then
	all=""
	for bdf in "$@"; do
		all="$all${all:+,}$bdf@2"
	done
	if insmod $here/phxfs.ko "pcibar=$all"; then
		$vmtest many || failed=1
		check module/rmmod_many "unload with $# devices" rmmod phxfs
	else
		result module/many_devices fail "insmod with $# devices"
	fi
else
	result module/many_devices skip "the rig provided $# ivshmem devices (8 needed)"
fi

# --- PCI distance: a BAR behind the NVMe's switch and one on the root bus ----
if [ -n "${PHX_PCIBAR_FAR_BDF:-}" ] && [ $# -ge 3 ]; then
	# dev0 = the far BAR (bus 00 sorts first), dev1 = the third switch BAR.
	if insmod $here/phxfs.ko "pcibar=$PHX_PCIBAR_FAR_BDF@2,$3@2"; then
		$vmtest p2p || failed=1
		check module/rmmod_p2p "unload after the distance group" rmmod phxfs
	else
		result p2p/load fail "insmod phxfs pcibar=$PHX_PCIBAR_FAR_BDF@2,$3@2"
	fi
	# Who owns the far BAR's p2pdma pool (P2PDMA kernels; skips elsewhere).
	if insmod $here/phxfs.ko "pcibar=$PHX_PCIBAR_FAR_BDF@2"; then
		$vmtest p2p-pool owned || failed=1
		rmmod phxfs
		$vmtest p2p-pool foreign || failed=1
	else
		result p2p/pool_load fail "insmod phxfs pcibar=$PHX_PCIBAR_FAR_BDF@2"
	fi
else
	result p2p/distance skip "the rig provided no far BAR"
fi

# --- NVIDIA provider over the emulation --------------------------------------
nvidia_suite

# --- libphoenix against the real module --------------------------------------
if [ -x $here/phx-direct-test ]; then
	if load_pcibar; then
		if $here/phx-direct-test >/tmp/direct.log 2>&1; then
			result libphoenix/direct_engine pass "$(tail -n 1 /tmp/direct.log | tr -d '"\\')"
		else
			result libphoenix/direct_engine fail "$(grep -E 'FAILED|Failure' /tmp/direct.log | head -n 3 | tr -d '"\\' | tr '\n' ' ')"
			cat /tmp/direct.log
		fi
		rmmod phxfs
	fi
fi
if [ -x $here/phx-gather-test ]; then
	if load_pcibar; then
		if $here/phx-gather-test >/tmp/gather.log 2>&1; then
			result libphoenix/gather pass "$(tail -n 1 /tmp/gather.log | tr -d '"\\')"
		else
			result libphoenix/gather fail "$(grep -E 'FAILED|Failure' /tmp/gather.log | head -n 3 | tr -d '"\\' | tr '\n' ' ')"
			cat /tmp/gather.log
		fi
		rmmod phxfs
	fi
fi

# --- libphoenix-cufile: a cuFile client over the direct engine ----------------
if [ -x $here/phx-cufile-test ]; then
	cufile_case
fi

# --- hardening: access control and the fuzzer (hardening.sh) -----------------
$here/hardening.sh || failed=1

# --- fault injection: crashes, device-mapper errors, memory pressure, the ---
# --- provider's free callback under I/O (fault.sh) ---------------------------
$here/fault.sh || failed=1

# --- remote storage: NVMe-oF and NFS on loopback (remote.sh) -----------------
if [ -x $here/remote.sh ]; then
	$here/remote.sh || failed=1
fi

exit $failed
