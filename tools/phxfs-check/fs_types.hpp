// SPDX-License-Identifier: MIT
// Names for statfs(2) f_type magic numbers.
#ifndef PHXFS_CHECK_FS_TYPES_HPP
#define PHXFS_CHECK_FS_TYPES_HPP

#include <cstdint>
#include <string>

namespace phxcheck {

/// "ext4", "xfs", ... for filesystems we know, "0x<hex>" for the rest.
[[nodiscard]] std::string fs_type_name(std::uint32_t magic);

}  // namespace phxcheck

#endif  // PHXFS_CHECK_FS_TYPES_HPP
