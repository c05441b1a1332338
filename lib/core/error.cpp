// SPDX-License-Identifier: MIT
#include "core/error.hpp"

#include <cstring>
#include <system_error>

#include "phoenix/phoenix.hpp"

namespace phx::detail {

std::string describe_io(std::string_view op, const std::filesystem::path &path,
                        std::uint64_t offset, std::size_t size) {
  std::string s(op);
  s += ' ';
  s += path.string();
  s += ": offset ";
  s += std::to_string(offset);
  s += ", size ";
  s += std::to_string(size);
  return s;
}

void throw_errno(int err, const std::string &what) {
  throw std::system_error(err, std::system_category(), what);
}

void throw_io(int err, std::string_view op, const std::filesystem::path &path, std::uint64_t offset,
              std::size_t size, std::size_t done, std::string_view detail) {
  std::string what = describe_io(op, path, offset, size);
  if (!detail.empty()) {
    what += ": ";
    what += detail;
  }
  if (done != 0) {
    what += " (after " + std::to_string(done) + " bytes)";
  }
  throw IoError(err, what, done);
}

std::string errno_text(int err) {
  // The GNU strerror_r may return a static string instead of filling buf.
  char buf[128] = {};
  const char *text = strerror_r(err, buf, sizeof(buf));
  return text;
}

}  // namespace phx::detail

namespace phx {

IoError::IoError(int err, const std::string &what, std::size_t bytes_done)
    : std::system_error(err, std::system_category(), what), bytes_done_(bytes_done) {}

}  // namespace phx
