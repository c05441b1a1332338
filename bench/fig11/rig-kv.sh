#!/bin/sh
# phx-kvcache's phoenix engine (direct, libphoenix) against phxfs.ko's pcibar
# provider: device 0's BAR from 1 MiB is the pool; every block verified.
set -u
# shellcheck disable=SC2086 # two BDFs, split on purpose
set -- $PHX_PCIBAR_BDFS
insmod /phx/phxfs.ko "pcibar=$1@2,$2@2" || exit 1
dir=/mnt/ext4/phx/kv
mkdir -p $dir
status=0
for bs in 8K 16K 64K; do
	/phx/bin/phx-kvcache --trace /phx/kvcache-traces/quality.txt --max-sequences 4 --block-size $bs \
		--engine direct,host --device-addr 1048576 --pool-blocks 960 --verify --file $dir/kv.bin \
		--min-file-size 92536832 --label "rig 6.1 TCG, emulated" >$dir/out-$bs.jsonl 2>$dir/err-$bs.txt
	rc=$?
	cat $dir/out-$bs.jsonl $dir/err-$bs.txt
	if [ $rc = 0 ] && grep -q '"engine":"direct".*"status":"ok"' $dir/out-$bs.jsonl && grep -q '"verified":true' $dir/out-$bs.jsonl; then r=pass; else r=fail; status=1; fi
	echo "PHX-RESULT {\"test\":\"kv/phoenix-$bs\",\"status\":\"$r\",\"detail\":\"exit $rc\"}" >>"$PHX_REPORT"
done
rmmod phxfs
exit $status
