#!/bin/sh
# remote-bench.sh KIND COMMAND... - runs COMMAND against remote storage that
# it sets up first and tears down afterwards (bench/reproduce fig9 and fig10
# in the rig; bench/phxrepro/experiments/remote_storage.py plans the calls).
# Every argument's @REMOTE@ becomes the storage:
#   nvmeof-tcp  the NVMe-oF/TCP namespace (loopback) exporting the raw disk
#   nfs-tcp     the NFSv4/TCP mount (loopback) of a folder of the ext4 disk
# The setup scripts' messages go to stderr; COMMAND's exit status is kept
# (2, "unavailable", stays a result).  Exit 1 when the setup fails.
set -u
[ $# -ge 2 ] || {
	echo "usage: remote-bench.sh nvmeof-tcp|nfs-tcp COMMAND..." >&2
	exit 1
}
kind=$1
shift
scripts=/phx/scripts
nqn=nqn.2026-01.io.phoenix:bench
export_dir=${PHX_EXT4_DIR:-/mnt/ext4}/phx/nfs-bench
mnt=/mnt/nfs-bench

teardown() {
	case "$kind" in
	nvmeof-tcp)
		sh $scripts/nvme-of initiator cleanup --nqn $nqn >&2
		sh $scripts/nvme-of target cleanup --nqn $nqn >&2
		;;
	nfs-tcp)
		sh $scripts/nfs client cleanup --export "$export_dir" --mount $mnt >&2
		sh $scripts/nfs server cleanup --export "$export_dir" --clients 127.0.0.1 >&2
		;;
	esac
}

case "$kind" in
nvmeof-tcp)
	sh $scripts/nvme-of target setup --device "$PHX_RAW_DEV" --nqn $nqn >&2 || exit 1
	target=$(sh $scripts/nvme-of initiator setup --nqn $nqn) || {
		teardown
		exit 1
	}
	;;
nfs-tcp)
	mkdir -p "$export_dir"
	sh $scripts/nfs server setup --export "$export_dir" --clients 127.0.0.1 --end-grace >&2 || exit 1
	sh $scripts/nfs client setup --export "$export_dir" --mount $mnt >&2 || {
		teardown
		exit 1
	}
	target=$mnt
	;;
*)
	echo "remote-bench.sh: unknown kind $kind" >&2
	exit 1
	;;
esac

n=$#
i=0
while [ $i -lt $n ]; do
	arg=$1
	shift
	case "$arg" in
	*@REMOTE@*) arg=$(printf '%s\n' "$arg" | sed "s|@REMOTE@|$target|g") ;;
	esac
	set -- "$@" "$arg"
	i=$((i + 1))
done
"$@"
rc=$?
teardown
exit $rc
