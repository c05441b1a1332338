// SPDX-License-Identifier: MIT
// --verify: every loaded tensor against a plain buffered read of its file.
#ifndef PHOENIX_TOOLS_PHX_LOAD_VERIFY_HPP
#define PHOENIX_TOOLS_PHX_LOAD_VERIFY_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "phoenix/safetensors.hpp"

namespace phx::load_tool {

struct VerifyResult {
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> mismatches;  ///< "name: first difference at byte N"
  double seconds = 0;
};

/// Compares each tensor of @p loaded byte for byte with pread of its file.
/// Throws std::system_error when a file cannot be read.
[[nodiscard]] VerifyResult verify(const safetensors::LoadedCheckpoint &loaded);

}  // namespace phx::load_tool

#endif  // PHOENIX_TOOLS_PHX_LOAD_VERIFY_HPP
