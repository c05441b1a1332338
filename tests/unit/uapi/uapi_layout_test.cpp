// SPDX-License-Identifier: MIT
// The ioctl ABI must not change by accident: sizes, offsets and numbers are
// what the module and every library build agree on.
#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

#include "phxfs_ioctl.h"

extern "C" {
std::size_t phx_c_sizeof_info(void);
std::size_t phx_c_sizeof_register(void);
std::size_t phx_c_sizeof_deregister(void);
unsigned long phx_c_ioc_register(void);
}

namespace {

// Every field of an ioctl struct is naturally aligned and the struct has no
// implicit padding, so 32- and 64-bit user space see the same layout.
static_assert(sizeof(phxfs_info) == 112);
static_assert(offsetof(phxfs_info, abi_version) == 0);
static_assert(offsetof(phxfs_info, argsz) == 4);
static_assert(offsetof(phxfs_info, device_index) == 8);
static_assert(offsetof(phxfs_info, provider) == 12);
static_assert(offsetof(phxfs_info, pci_domain) == 16);
static_assert(offsetof(phxfs_info, pci_bdf) == 20);
static_assert(offsetof(phxfs_info, page_size) == 24);
static_assert(offsetof(phxfs_info, flags) == 28);
static_assert(offsetof(phxfs_info, bar_size) == 32);
static_assert(offsetof(phxfs_info, regs_live) == 40);
static_assert(offsetof(phxfs_info, regs_total) == 48);
static_assert(offsetof(phxfs_info, pages_mapped) == 56);
static_assert(offsetof(phxfs_info, revocations) == 64);
static_assert(offsetof(phxfs_info, errors) == 72);
static_assert(offsetof(phxfs_info, features) == 80);
static_assert(offsetof(phxfs_info, reserved) == 88);

static_assert(sizeof(phxfs_register) == 64);
static_assert(offsetof(phxfs_register, abi_version) == 0);
static_assert(offsetof(phxfs_register, argsz) == 4);
static_assert(offsetof(phxfs_register, flags) == 8);
static_assert(offsetof(phxfs_register, pad) == 12);
static_assert(offsetof(phxfs_register, device_addr) == 16);
static_assert(offsetof(phxfs_register, length) == 24);
static_assert(offsetof(phxfs_register, handle) == 32);
static_assert(offsetof(phxfs_register, mmap_offset) == 40);
static_assert(offsetof(phxfs_register, pin) == 48);
static_assert(offsetof(phxfs_register, reserved) == 56);

static_assert(sizeof(phxfs_deregister) == 32);
static_assert(offsetof(phxfs_deregister, abi_version) == 0);
static_assert(offsetof(phxfs_deregister, argsz) == 4);
static_assert(offsetof(phxfs_deregister, handle) == 8);
static_assert(offsetof(phxfs_deregister, reserved) == 16);

static_assert(std::is_trivially_copyable_v<phxfs_info>);
static_assert(std::is_standard_layout_v<phxfs_register>);
static_assert(alignof(phxfs_info) == 8 && alignof(phxfs_register) == 8 &&
              alignof(phxfs_deregister) == 8);

TEST(UapiLayout, CAndCppAgree) {
  EXPECT_EQ(phx_c_sizeof_info(), sizeof(phxfs_info));
  EXPECT_EQ(phx_c_sizeof_register(), sizeof(phxfs_register));
  EXPECT_EQ(phx_c_sizeof_deregister(), sizeof(phxfs_deregister));
  EXPECT_EQ(phx_c_ioc_register(), static_cast<unsigned long>(PHXFS_IOC_REGISTER));
}

TEST(UapiLayout, IoctlNumbersEncodeDirectionSizeAndType) {
  EXPECT_EQ(_IOC_DIR(PHXFS_IOC_GET_INFO), static_cast<unsigned>(_IOC_READ | _IOC_WRITE));
  EXPECT_EQ(_IOC_SIZE(PHXFS_IOC_GET_INFO), sizeof(phxfs_info));
  EXPECT_EQ(_IOC_SIZE(PHXFS_IOC_REGISTER), sizeof(phxfs_register));
  EXPECT_EQ(_IOC_SIZE(PHXFS_IOC_DEREGISTER), sizeof(phxfs_deregister));
  EXPECT_EQ(_IOC_TYPE(PHXFS_IOC_GET_INFO), static_cast<unsigned>(PHXFS_IOC_MAGIC));
  EXPECT_NE(PHXFS_IOC_GET_INFO, PHXFS_IOC_REGISTER);
  EXPECT_NE(PHXFS_IOC_REGISTER, PHXFS_IOC_DEREGISTER);
}

TEST(UapiLayout, AbiVersionAndLimits) {
  EXPECT_EQ(PHXFS_ABI_VERSION, 1U);
  EXPECT_LE(PHXFS_ABI_VERSION_MIN, PHXFS_ABI_VERSION);
  EXPECT_GE(PHXFS_MAX_DEVICES, 8U);
  EXPECT_STREQ(PHXFS_DEVICE_PREFIX, "/dev/phxfs_dev");
}

}  // namespace
