// SPDX-License-Identifier: MIT
#include "sysfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "common/fd.hpp"

namespace phxcheck {

std::string errno_message(int err) {
  return std::generic_category().message(err);
}

std::optional<std::string> read_text(const std::string &path, std::string &error,
                                     std::size_t limit) {
  // POSIX read rather than iostreams: /proc and /sys files report size 0,
  // and we want errno for the message.
  const phxtools::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    error = path + ": " + errno_message(errno);
    return std::nullopt;
  }
  std::string text;
  std::array<char, 8192> chunk{};
  while (text.size() < limit) {
    const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      error = path + ": " + errno_message(errno);
      return std::nullopt;
    }
    if (n == 0) {
      break;
    }
    text.append(chunk.data(), static_cast<std::size_t>(n));
  }
  return text;
}

std::optional<std::string> read_line(const std::string &path) {
  std::string ignored;
  auto text = read_text(path, ignored, 4096);
  if (!text) {
    return std::nullopt;
  }
  const auto end = text->find('\n');
  return std::string(trim(std::string_view(*text).substr(0, end)));
}

std::optional<std::vector<std::string>> list_dir(const std::string &path, std::string &error) {
  std::error_code ec;
  std::filesystem::directory_iterator it(path, ec);
  if (ec) {
    error = path + ": " + ec.message();
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const std::filesystem::directory_iterator end; it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    error = path + ": " + ec.message();
    return std::nullopt;
  }
  return names;
}

bool path_exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) {
    return {};
  }
  const auto last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

}  // namespace phxcheck
