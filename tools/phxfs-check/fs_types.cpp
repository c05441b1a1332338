// SPDX-License-Identifier: MIT
#include "fs_types.hpp"

#include <array>
#include <cstdio>
#include <string_view>
#include <utility>

namespace phxcheck {
namespace {

// Values from the kernel's include/uapi/linux/magic.h and the filesystems'
// own sources; spelled out because not every one is in linux/magic.h
// (fuse, zfs) and older headers lack some.
constexpr std::array<std::pair<std::uint32_t, std::string_view>, 17> kNames = {{
    {0xEF53U, "ext4"},  // ext2, ext3 and ext4 share the magic
    {0x58465342U, "xfs"},
    {0x9123683EU, "btrfs"},
    {0x01021994U, "tmpfs"},
    {0x858458F6U, "ramfs"},
    {0x6969U, "nfs"},
    {0x794C7630U, "overlay"},
    {0x65735546U, "fuse"},
    {0xF2F52010U, "f2fs"},
    {0x2FC12FC1U, "zfs"},
    {0x01021997U, "9p"},
    {0xFF534D42U, "cifs"},
    {0xFE534D42U, "smb2"},
    {0x73717368U, "squashfs"},
    {0x9FA0U, "proc"},
    {0x62656572U, "sysfs"},
    {0x4D44U, "vfat"},
}};

}  // namespace

std::string fs_type_name(std::uint32_t magic) {
  for (const auto &[value, name] : kNames) {
    if (value == magic) {
      return std::string(name);
    }
  }
  std::array<char, 16> hex{};
  std::snprintf(hex.data(), hex.size(), "0x%x",
                magic);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  return hex.data();
}

}  // namespace phxcheck
