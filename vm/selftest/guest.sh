#!/bin/sh
# The rig's own guest (vm/run --selftest): checks the environment /init
# hands over and produces real evidence without phxfs: it copies NVMe bytes
# into the ivshmem BARs through /dev/mem, so the host can compare them.
# Protocol: vm/README.md.
# shellcheck disable=SC2317  # functions run through check()

result() { # test status detail
  printf 'PHX-RESULT {"test":"selftest:%s","status":"%s","detail":"%s"}\n' "$1" "$2" "$3" >"$PHX_REPORT"
}
check() { # test command...
  t=$1
  shift
  if "$@" >/tmp/out 2>&1; then result "$t" pass "$*"; else result "$t" fail "$* -> $(tr '\n"' ' _' </tmp/out)"; fi
}
bar2() { # bdf -> physical address of BAR 2
  sed -n 3p "/sys/bus/pci/devices/$1/resource" | cut -d' ' -f1
}

# shellcheck disable=SC2086  # the BDFs, split on purpose
set -- $PHX_PCIBAR_BDFS
check env-raw test -b "$PHX_RAW_DEV"
check env-ext4 grep -q " $PHX_EXT4_DIR ext4 " /proc/mounts
check env-bars test "$#" -ge 2  # the two 256 MiB BARs first, then any smaller ones
check env-kernel test "$PHX_KERNEL" = "$(uname -r)"
result only-filter skip "PHX_ONLY='$PHX_ONLY' ignored by the selftest"

a0=$(($(bar2 "$1")))
a1=$(($(bar2 "$2")))
check bar-size test "$(($(sed -n 3p /sys/bus/pci/devices/"$1"/resource | cut -d' ' -f2) - a0 + 1))" = $((256 << 20))

# /dev/mem's read/write stop at the end of RAM, so the BARs (above it) are
# written word by word with busybox devmem (mmap of /dev/mem).
copy_to_bar() { # disk_off len bar_addr
  i=0
  for w in $(dd if="$PHX_RAW_DEV" bs=512 skip=$(($1 / 512)) count=$(($2 / 512)) 2>/dev/null | od -A n -v -t x8); do
    devmem $(($3 + i)) 64 "0x$w" || return 1
    i=$((i + 8))
  done
  [ "$i" = "$2" ]
}

# Disk bytes [4 MiB, 4 MiB + 1 KiB) -> shm0 at 64 KiB.
check copy-disk-to-shm0 copy_to_bar 4194304 1024 $((a0 + 65536))
echo "PHX-EVIDENCE {\"kind\":\"shm_eq_disk\",\"test\":\"selftest-disk\",\"shm\":0,\"shm_off\":65536,\"disk_off\":4194304,\"len\":1024}" >"$PHX_REPORT"

# Disk bytes [8 MiB, 8 MiB + 512)) -> shm1 at 0 and -> ext4 file at 4 KiB.
check copy-disk-to-shm1 copy_to_bar 8388608 512 "$a1"
dd if=/dev/zero of="$PHX_EXT4_DIR/phx/self.bin" bs=4096 count=1 2>/dev/null
check copy-disk-to-file dd if="$PHX_RAW_DEV" of="$PHX_EXT4_DIR/phx/self.bin" bs=512 skip=16384 seek=8 count=1 conv=notrunc
check read-back-shm0 test "$(devmem $((a0 + 65536)) 64)" = "0x$(dd if="$PHX_RAW_DEV" bs=512 skip=8192 count=1 2>/dev/null | od -A n -v -t x8 | head -1 | cut -d' ' -f2 | tr a-f A-F)"
sync
echo "PHX-EVIDENCE {\"kind\":\"shm_eq_file\",\"test\":\"selftest-file\",\"shm\":1,\"shm_off\":0,\"path\":\"phx/self.bin\",\"file_off\":4096,\"len\":512}" >"$PHX_REPORT"
# Left running on purpose: /init must stop it before unmounting ext4.
(cd "$PHX_EXT4_DIR" && sleep 1000) &
exit 0
