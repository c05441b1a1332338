#!/bin/sh
# demo.sh - scripts/demo's entry in the rig: load phxfs over the first
# emulated device and run the example end to end.
set -u
# shellcheck disable=SC2086
set -- $PHX_PCIBAR_BDFS
insmod /phx/phxfs.ko "pcibar=$1@2,$2@2" || exit 1
/phx/phx-demo-guest
status=$?
rmmod phxfs || status=1
exit $status
