"""Phoenix VM rig: Debian stock kernels in QEMU with emulated NVMe and ivshmem.

Subcommands (vm/run and vm/fetch-kernels are thin wrappers):
  fetch   download and unpack the newest Debian 6.1 / 6.12 / 7.2 kernels into the
          cache, check their headers by building a hello module
  run     build the guest for each kernel, boot it, judge the report

Modules, one concern each (imports only go down this list):
  config      paths, the emulated machine, the guest's stock modules
  common      RigError, progress lines, running host commands
  kernels     kernel series, apt, download and unpack, debootstrap build root
  bootimage   the image QEMU boots (bzImage, or its vmlinux for PVH)
  elf         static or dynamic, DT_NEEDED and loader of an ELF file
  cpio        newc writer
  modules     stock modules: load order, decompression, modprobe index
  userland    Debian programs in the guest and the libraries they need
  initramfs   the guest's initramfs
  images      the raw and ext4 disk images
  qemu        the QEMU command line and PCIe topology, the KVM probe
  boot        running QEMU: readiness, timeouts, backtraces of a hung guest
  kernellog   the kernel log scan
  evidence    host checks of PHX-EVIDENCE
  verdict     the report protocol and the verdict on one boot
  runner      one kernel's run, its report file and summary
  cli         vm/fetch-kernels and vm/run

See vm/README.md for the guest protocol and the layout of the work folder.
Python 3 standard library only.
"""
