// SPDX-License-Identifier: MIT
// phxbench's configuration: what the command line asked for, checked.
#ifndef PHXBENCH_OPTIONS_HPP
#define PHXBENCH_OPTIONS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace phxbench {

enum class Mode { sync, async, batch, stream };
enum class IoDir { read, write };
enum class Pattern { seq, rand };

[[nodiscard]] std::string_view to_string(Mode mode) noexcept;
[[nodiscard]] std::string_view to_string(IoDir dir) noexcept;
[[nodiscard]] std::string_view to_string(Pattern pattern) noexcept;

struct Options {
  std::string file;
  std::string engine = "posix";
  Mode mode = Mode::sync;
  IoDir io = IoDir::read;
  Pattern pattern = Pattern::seq;
  std::uint64_t io_size = 4096;
  std::uint64_t length = 0;  ///< file range used; 0: the file's size
  unsigned threads = 1;
  unsigned depth = 1;  ///< io_uring queue depth (async), batch size (batch, stream)
  int device = 0;
  /// direct engine: device addresses to register, from here on, instead of
  /// GPU memory from cudaMalloc (the rig's PCI BAR provider, whose device
  /// addresses are BAR byte offsets)
  std::optional<std::uint64_t> device_addr;
  std::optional<double> duration_s;          ///< time bound
  std::optional<std::uint64_t> total_bytes;  ///< size bound (default: length)
  std::optional<double> warmup_s;
  std::optional<std::uint64_t> warmup_bytes;
  bool create = false;
  bool verify = false;
  bool direct = true;
  bool json = false;
  bool quiet = false;
  std::uint64_t seed = 1;
};

}  // namespace phxbench

#endif  // PHXBENCH_OPTIONS_HPP
