// SPDX-License-Identifier: MIT
// Sizes, addresses and durations as the tools' command lines spell them.
#ifndef PHX_TOOLS_UNITS_HPP
#define PHX_TOOLS_UNITS_HPP

#include <cstdint>
#include <string_view>

namespace phxtools {

/// Parses "4096", "4K", "4KiB", "16M", "1G", "1T" (powers of 1024); throws
/// std::invalid_argument with a sentence naming the bad value.
[[nodiscard]] std::uint64_t parse_size(std::string_view text);

/// Parses a device address: decimal, 0x hexadecimal, or a size ("192M");
/// throws std::invalid_argument naming the bad value.
[[nodiscard]] std::uint64_t parse_address(std::string_view text);

/// Parses "10", "2.5s", "500ms" as seconds.
[[nodiscard]] double parse_seconds(std::string_view text);

}  // namespace phxtools

#endif  // PHX_TOOLS_UNITS_HPP
