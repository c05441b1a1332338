// SPDX-License-Identifier: MIT
#include "common/fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/pattern.hpp"
#include "common/pattern_file.hpp"

namespace phxtools {
namespace {

std::filesystem::path scratch(const char *name) {
  return std::filesystem::temp_directory_path() /
         (std::string("phx_tools_") + name + "_" + std::to_string(::getpid()));
}

TEST(UniqueFd, ClosesOnDestructionAndMovesOwnership) {
  int raw = -1;
  {
    UniqueFd a = open_fd("/dev/null", O_RDONLY);
    raw = a.get();
    UniqueFd b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(UniqueFd, OpenNamesThePath) {
  try {
    (void)open_fd("/nonexistent/phx", O_RDONLY);
    FAIL();
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/phx"), std::string::npos);
  }
}

TEST(PatternFile, WrittenAndReadBackThroughTheFdHelpers) {
  const auto path = scratch("pattern");
  create_pattern_file(path.string(), 10000);
  const UniqueFd fd = open_fd(path.string(), O_RDONLY);
  std::array<std::byte, 999> buf{};
  pread_all(fd.get(), buf, 4321, "pattern");
  EXPECT_EQ(find_mismatch(buf, 4321), std::nullopt);
  EXPECT_THROW(pread_all(fd.get(), buf, 9500, "pattern"), std::system_error);  // past the end
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace phxtools
