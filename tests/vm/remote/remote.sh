#!/bin/sh
# remote.sh - the remote-storage group of the guest suite (issue 8,
# docs/remote-storage.md): NVMe over Fabrics on TCP and on Soft-RoCE
# (rdma_rxe), and NFSv4 on TCP and RDMA, all on loopback inside this guest,
# set up and torn down by the repository's scripts/nvme-of and scripts/nfs
# with the kernel's own target (nvmet) and server (nfsd).  phx-remote-test
# moves bytes between phxfs-registered device memory (device 1's BAR range
# [128 MiB, 160 MiB), which no other group uses) and the remote storage with
# O_DIRECT; the host checks the evidence against its disk images.  Run by
# guest.sh, or alone: vm/run --only 'remote/*'.
set -u
here=/phx
report=${PHX_REPORT:-/dev/stdout}
failed=0
rtest=$here/phx-remote-test
MiB=1048576
len=$((4 * MiB))
# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS

# (These helpers run through step/expect_exit's "$@".)
# shellcheck disable=SC2317
run_nvmeof() {
	sh "$here/scripts/nvme-of" "$@"
}

# shellcheck disable=SC2317
run_nfs() {
	sh "$here/scripts/nfs" "$@"
}

result() {
	# $1 test, $2 pass|fail|skip, $3 detail (quotes and backslashes dropped)
	# shellcheck disable=SC1003
	d=$(printf '%s' "$3" | tr -d '"\\' | tr '\n\t' '  ' | cut -c1-400)
	printf 'PHX-RESULT {"test":"%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$d" >>"$report"
	echo "$2 $1 $d"
	[ "$2" = fail ] && failed=1
	return 0
}

note() {
	printf 'PHX-NOTE %s\n' "$(printf '%s' "$*" | tr '\n' ' ')" >>"$report"
}

# step NAME DETAIL COMMAND...: pass when COMMAND succeeds (output in $out).
step() {
	name=$1
	detail=$2
	shift 2
	out=$("$@" 2>&1)
	rc=$?
	if [ $rc = 0 ]; then
		result "$name" pass "$detail"
		return 0
	fi
	result "$name" fail "$detail: exit $rc: $(echo "$out" | tail -n 3)"
	return 1
}

# expect_exit NAME CODE PATTERN COMMAND...: COMMAND must fail with CODE and
# say PATTERN (an error case of a setup script).
expect_exit() {
	name=$1
	want=$2
	pattern=$3
	shift 3
	out=$("$@" 2>&1)
	rc=$?
	if [ "$rc" = "$want" ] && echo "$out" | grep -q -- "$pattern"; then
		result "$name" pass "exit $rc: $out"
	else
		result "$name" fail "wanted exit $want and '$pattern', got exit $rc: $out"
	fi
}

# rates NAME: the transfer rates phx-remote-test printed, as a note.
rates() {
	note "remote rates $1 (CPU copies the payload: TCP/rxe, not P2P): $(grep '^{' "/tmp/remote-$1.log" | tr '\n' ' ')"
}

# transfer NAME phx-remote-test ARGS...: runs it, one result.
transfer() {
	name=$1
	shift
	if "$rtest" "$@" >"/tmp/remote-$name.log" 2>&1; then
		result "remote/$name" pass "$(grep -c '^{' "/tmp/remote-$name.log") transfers of $len bytes verified (device memory <-> remote)"
		rates "$name"
	else
		result "remote/$name" fail "$(tail -n 3 "/tmp/remote-$name.log")"
	fi
}

nvmet_empty() {
	d=/sys/kernel/config/nvmet
	[ ! -d $d ] || { [ -z "$(ls -A $d/subsystems)" ] && [ -z "$(ls -A $d/ports)" ]; }
}

missing=""
for t in nvme exportfs rpc.nfsd rpc.mountd mount.nfs rdma; do
	command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
done
if [ -n "$missing" ]; then
	for t in nvmeof_tcp nvmeof_rdma nfs_tcp nfs_rdma; do
		result "remote/$t" skip "guest tools missing:$missing (the rig's GUEST_TOOLS; PHX_VM_TOOLS=none?)"
	done
	exit 0
fi
if ! insmod $here/phxfs.ko "pcibar=$1@2,$2@2"; then
	result remote/load fail "insmod phxfs pcibar=$1@2,$2@2"
	exit 1
fi

raw=$PHX_RAW_DEV
raw_bytes=$(blockdev --getsize64 "$raw")
# Writes go to the raw disk's last 16 MiB, which no other group touches (the
# pcibar group writes [1/2, 7/8), the NVIDIA group from 7/8 on, and their
# evidence is checked against the disk as it is at the end of the run).
write_base=$((raw_bytes - 16 * MiB))

# --- setup scripts: error cases -----------------------------------------------
expect_exit remote/nvmeof_missing_device 4 "/dev/phx-none does not exist" \
	run_nvmeof target setup --device /dev/phx-none
expect_exit remote/nvmeof_not_block_device 4 "not a block device" \
	run_nvmeof target setup --device /etc/phx/config
expect_exit remote/nvmeof_bad_transport 1 "use tcp or rdma" \
	run_nvmeof target setup --transport fc --device "$raw"
expect_exit remote/nfs_missing_export 4 "/nonexistent does not exist" \
	run_nfs server setup --export /nonexistent
if nvmet_empty; then
	result remote/nvmeof_errors_leave_nothing pass "no configfs entries after the refused setups"
else
	result remote/nvmeof_errors_leave_nothing fail "$(find /sys/kernel/config/nvmet -maxdepth 2)"
fi

# --- NVMe over Fabrics --------------------------------------------------------
# shellcheck disable=SC2317
nvmeof_cleanup_both() {
	run_nvmeof initiator cleanup "$@" && run_nvmeof target cleanup "$@"
}

# nvmeof_group TRANSPORT ADDR BAR_OFF READ_OFF WRITE_OFF
nvmeof_group() {
	tr=$1
	addr=$2
	grp=nvmeof_$tr
	nqn=nqn.2026-01.io.phoenix:rig-$tr
	opts="--transport $tr --addr $addr --nqn $nqn"
	# shellcheck disable=SC2086
	step "remote/${grp}_target" "export $raw over $tr $addr:4420" \
		run_nvmeof target setup $opts --device "$raw" || return
	# shellcheck disable=SC2086
	step "remote/${grp}_target_again" "target setup is idempotent" \
		run_nvmeof target setup $opts --device "$raw"
	# shellcheck disable=SC2086
	if ! dev=$(run_nvmeof initiator setup $opts 2>/tmp/remote-connect.err); then
		result "remote/${grp}_connect" fail "$(cat /tmp/remote-connect.err)"
		run_nvmeof target cleanup $opts
		return
	fi
	# shellcheck disable=SC2086
	again=$(run_nvmeof initiator setup $opts 2>&1)
	if [ -b "$dev" ] && [ "$again" = "$dev" ]; then
		result "remote/${grp}_connect" pass "nvme connect gave $dev (again: same device, no second controller)"
		transfer "$grp" block "$grp" "$dev" "$raw" "$3" "$4" "$5" "$len"
	else
		result "remote/${grp}_connect" fail "device '$dev', second setup printed '$again'"
	fi
	# shellcheck disable=SC2086
	step "remote/${grp}_disconnect" "nvme disconnect" run_nvmeof initiator cleanup $opts
	# shellcheck disable=SC2086
	step "remote/${grp}_target_cleanup" "configfs entries removed" run_nvmeof target cleanup $opts
	# shellcheck disable=SC2086
	# shellcheck disable=SC2086
	step "remote/${grp}_cleanup_again" "cleanup is idempotent" nvmeof_cleanup_both $opts
	ctrls=$(grep -l "$nqn" /sys/class/nvme/nvme*/subsysnqn 2>/dev/null)
	if nvmet_empty && [ -z "$ctrls" ] && [ ! -b "$dev" ]; then
		result "remote/${grp}_nothing_left" pass "no subsystem, port or controller left; $dev gone"
	else
		result "remote/${grp}_nothing_left" fail "configfs: $(find /sys/kernel/config/nvmet -mindepth 2 -maxdepth 2) controllers: $ctrls"
	fi
}

nvmeof_group tcp 127.0.0.1 $((128 * MiB)) $((8 * MiB)) "$write_base"

# Soft-RoCE needs an Ethernet netdev (it cannot bind lo): a dummy device,
# whose own address rxe reaches through its loopback path.
rxe_ready=""
if ! out=$(modprobe rdma_rxe 2>&1); then
	rxe_why="modprobe rdma_rxe failed: $out"
elif ! out=$(ip link add phx0 type dummy 2>&1 && ip addr add 10.99.0.1/24 dev phx0 2>&1 &&
	ip link set phx0 up 2>&1); then
	rxe_why="dummy netdev: $out"
elif ! out=$(rdma link add rxe0 type rxe netdev phx0 2>&1); then
	rxe_why="rdma link add rxe0 type rxe netdev phx0: $out $(dmesg | grep -i rxe | tail -n 2)"
else
	rxe_ready=1
	note "Soft-RoCE: $(rdma link show rxe0/1 2>&1)"
fi
if [ -n "$rxe_ready" ]; then
	nvmeof_group rdma 10.99.0.1 $((136 * MiB)) $((16 * MiB)) $((write_base + 2 * len))
else
	result remote/nvmeof_rdma skip "$rxe_why"
fi

# --- NFS ------------------------------------------------------------------------
export_dir=$PHX_EXT4_DIR/phx/nfs
mnt=/mnt/nfs
mkdir -p "$export_dir"
# shellcheck disable=SC2317
nfs_cleanup_both() {
	run_nfs client cleanup --export "$export_dir" --mount "$mnt" &&
		run_nfs server cleanup --export "$export_dir" --clients "$1"
}

# nfs_group TRANSPORT ADDR BAR_OFF
nfs_group() {
	tr=$1
	addr=$2
	grp=nfs_$tr
	step "remote/${grp}_server" "export $export_dir over $tr" \
		run_nfs server setup --export "$export_dir" --clients "$addr" --transport "$tr" --end-grace || return
	step "remote/${grp}_server_again" "server setup is idempotent" \
		run_nfs server setup --export "$export_dir" --clients "$addr" --transport "$tr"
	if step "remote/${grp}_mount" "mount $addr:$export_dir on $mnt over $tr" \
		run_nfs client setup --server "$addr" --export "$export_dir" --mount "$mnt" --transport "$tr"; then
		note "nfs $tr mount: $(grep " $mnt " /proc/mounts)"
		transfer "$grp" file "$grp" "$mnt" "$export_dir" phx/nfs "$3" "$len"
		step "remote/${grp}_umount" "unmount" run_nfs client cleanup --export "$export_dir" --mount "$mnt"
	fi
	step "remote/${grp}_server_cleanup" "unexport, stop nfsd and mountd" \
		run_nfs server cleanup --export "$export_dir" --clients "$addr"
	step "remote/${grp}_cleanup_again" "cleanup is idempotent" nfs_cleanup_both "$addr"
	threads=$(cat /proc/fs/nfsd/threads 2>/dev/null || echo 0)
	if [ "$threads" = 0 ] && ! grep -q " $mnt " /proc/mounts && ! pidof rpc.mountd >/dev/null; then
		result "remote/${grp}_nothing_left" pass "no nfsd thread, mount or rpc.mountd left"
	else
		result "remote/${grp}_nothing_left" fail "threads=$threads mounts: $(grep nfs /proc/mounts) mountd: $(pidof rpc.mountd)"
	fi
}

nfs_group tcp 127.0.0.1 $((144 * MiB))
if [ -n "$rxe_ready" ]; then
	nfs_group rdma 10.99.0.1 $((152 * MiB))
else
	result remote/nfs_rdma skip "$rxe_why"
fi

if [ -n "$rxe_ready" ]; then
	rdma link delete rxe0 || result remote/rxe_cleanup fail "rdma link delete rxe0"
fi
ip link del phx0 2>/dev/null
rmmod phxfs || result remote/rmmod fail "rmmod phxfs after the remote group"
exit $failed
