// SPDX-License-Identifier: MIT
// phx::File: opening with O_DIRECT where possible, reporting where not,
// reading into registrations, and errors that name file, offset and size.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using test::AlignedBuffer;
using test::find_mismatch;
using test::TempDir;

// Runs body, expects std::system_error with errno err and every needle in
// what().
template <typename Body>
void expect_error(int err, std::initializer_list<std::string> needles, Body &&body) {
  try {
    body();
    ADD_FAILURE() << "expected errno " << err;
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), err) << e.what();
    for (const auto &needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.what();
    }
  }
}

TEST(File, OpensWithDirectIoOnADiskFilesystem) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 4096, 1);
  const File f(dir / "f", O_RDONLY);
  EXPECT_TRUE(f.direct_io());
  EXPECT_GE(f.offset_alignment(), 512U);
  EXPECT_EQ(f.size(), 4096U);
  const File buffered(dir / "f", O_RDONLY, 0, DirectIo::off);
  EXPECT_FALSE(buffered.direct_io());
  EXPECT_EQ(buffered.offset_alignment(), 1U);
}

TEST(File, ReportsWhenTheFilesystemHasNoDirectIo) {
  std::string why;
  auto mnt = test::ScratchMount::make("ramfs", "", why);
  if (!mnt) {
    GTEST_SKIP() << why;
  }
  const auto path = mnt->path() / "f";
  File f(path, O_RDWR | O_CREAT | O_EXCL);  // created once, no EEXIST on fallback
  EXPECT_FALSE(f.direct_io());
  AlignedBuffer buf(10000);
  test::fill_pattern(buf.span(), 3, 0);
  EXPECT_EQ(f.write(buf.span(), 0), 10000U);
  std::memset(buf.data(), 0, buf.size());
  EXPECT_EQ(f.read(buf.span().subspan(1, 9000), 1), 9000U);
  EXPECT_EQ(find_mismatch({buf.data() + 1, 9000}, 3, 1), std::nullopt);
  expect_error(EINVAL, {path.string(), "does not support O_DIRECT"},
               [&] { File g(path, O_RDONLY, 0, DirectIo::required); });
}

TEST(File, OpenErrorsNameTheFile) {
  TempDir dir;
  expect_error(ENOENT, {(dir / "missing").string()}, [&] { File f(dir / "missing", O_RDONLY); });
  expect_error(EINVAL, {"O_APPEND"}, [&] { File f(dir / "a", O_WRONLY | O_CREAT | O_APPEND); });
}

// open() of a FIFO waits for its other end: a wrong path must fail, not hang.
TEST(File, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  const auto fifo = dir / "fifo";
  EXPECT_TRUE(test::returns_without_a_fifo_writer(
      fifo,
      [&] {
        expect_error(ESPIPE, {fifo.string(), "FIFO"}, [&] { File f(fifo, O_RDONLY); });
      }))
      << "File(" << fifo << ") waited for a writer";
  expect_error(ESPIPE, {fifo.string()}, [&] { File f(fifo, O_RDONLY, 0, DirectIo::off); });
}

// A folder opens read-only and fails at every read: refused where it is named.
TEST(File, AFolderIsRefusedWhenOpened) {
  TempDir dir;
  expect_error(EISDIR, {dir.path().string(), "folder"}, [&] { File f(dir.path(), O_RDONLY); });
  expect_error(EISDIR, {dir.path().string()},
               [&] { File f(dir.path(), O_RDONLY, 0, DirectIo::off); });
}

TEST(File, CachedFractionSaysWhatThePageCacheHolds) {
  TempDir dir;
  const auto path = dir / "cached";
  test::write_pattern_file(path, 1 << 20, 7);
  File f(path, O_RDONLY, 0, DirectIo::off);
  // Just written: every page is in the cache.
  EXPECT_DOUBLE_EQ(f.cached_fraction(0, 1 << 20), 1.0);
  EXPECT_DOUBLE_EQ(f.cached_fraction(4096, std::numeric_limits<std::uint64_t>::max()), 1.0);
  EXPECT_DOUBLE_EQ(f.cached_fraction(1 << 20, 4096), 0.0);  // past the end
  EXPECT_DOUBLE_EQ(f.cached_fraction(0, 0), 0.0);
}

TEST(File, NonBlockingOpenIsOnlyKeptWhenAsked) {
  TempDir dir;
  File f(dir / "a", O_RDWR | O_CREAT);
  EXPECT_EQ(::fcntl(f.fd(), F_GETFL) & O_NONBLOCK, 0);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  File g(dir / "a", O_RDONLY | O_NONBLOCK);
  EXPECT_NE(::fcntl(g.fd(), F_GETFL) & O_NONBLOCK, 0);  // NOLINT(cppcoreguidelines-pro-type-vararg)
}

TEST(File, ReadsIntoARegistrationAtAnyOffset) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 3 << 20, 8);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(4 << 20);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir / "f", O_RDONLY);
  EXPECT_EQ(f.read(reg, 0, 3 << 20, 0), 3U << 20);
  EXPECT_EQ(find_mismatch({mem.data(), 3 << 20}, 8, 0), std::nullopt);
  EXPECT_EQ(f.read(reg, 777, 100000, 4097), 100000U);
  EXPECT_EQ(find_mismatch({mem.data() + 777, 100000}, 8, 4097), std::nullopt);
  // End of file: short count.
  EXPECT_EQ(f.read(reg, 0, 4 << 20, 0), 3U << 20);
}

TEST(File, WriteThenReadBackThroughRegistrations) {
  TempDir dir;
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer out(1 << 20);
  AlignedBuffer in(1 << 20);
  test::fill_pattern(out.span(), 12, 333);
  auto src = dev.register_memory(out.data(), out.size());
  auto dst = dev.register_memory(in.data(), in.size());
  File f(dir / "rw", O_RDWR | O_CREAT);
  EXPECT_EQ(f.write(src, 0, out.size(), 333), out.size());
  f.sync();
  EXPECT_EQ(f.size(), 333U + out.size());
  EXPECT_EQ(f.read(dst, 0, in.size(), 333), in.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
}

TEST(File, RegistrationBoundsErrorsNameFileOffsetAndSize) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 8192, 1);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(8192);
  auto reg = dev.register_memory(mem.data(), 4096);
  File f(dir / "f", O_RDONLY);
  const std::string name = (dir / "f").string();
  expect_error(EINVAL, {"read " + name, "offset 100", "size 4096", "exceeds"},
               [&] { (void)f.read(reg, 1, 4096, 100); });
  expect_error(EINVAL, {"read " + name, "size 1"}, [&] { (void)f.read(reg, 4096, 1, 0); });
  Registration empty;
  expect_error(EINVAL, {"empty registration"}, [&] { (void)f.read(empty, 0, 1, 0); });
  expect_error(EINVAL, {"largest offset"},
               [&] { (void)f.read(reg, 0, 16, std::uint64_t{1} << 63); });
}

TEST(File, WriteOnReadOnlyFileThrowsIoErrorNamingTheRequest) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 8192, 1);
  File f(dir / "f", O_RDONLY);
  AlignedBuffer buf(4096);
  try {
    (void)f.write(buf.span(), 4096);
    FAIL() << "expected EBADF";
  } catch (const IoError &e) {
    EXPECT_EQ(e.code().value(), EBADF);
    EXPECT_EQ(e.bytes_done(), 0U);
    EXPECT_NE(
        std::string(e.what()).find("write " + (dir / "f").string() + ": offset 4096, size 4096"),
        std::string::npos)
        << e.what();
  }
  EXPECT_EQ(find_mismatch(test::read_whole_file(dir / "f"), 1, 0), std::nullopt);
}

TEST(File, FullFilesystemIoErrorCarriesBytesDone) {
  std::string why;
  auto mnt = test::ScratchMount::make("tmpfs", "size=1m", why);
  if (!mnt) {
    GTEST_SKIP() << why;
  }
  File f(mnt->path() / "f", O_RDWR | O_CREAT);
  AlignedBuffer buf(3 << 20);
  test::fill_pattern(buf.span(), 2, 0);
  try {
    (void)f.write(buf.span(), 0);
    FAIL() << "expected ENOSPC";
  } catch (const IoError &e) {
    EXPECT_EQ(e.code().value(), ENOSPC);
    EXPECT_GT(e.bytes_done(), 0U);
    EXPECT_LT(e.bytes_done(), buf.size());
    EXPECT_NE(std::string(e.what()).find("size 3145728"), std::string::npos) << e.what();
    const auto data = test::read_whole_file(mnt->path() / "f");
    ASSERT_GE(data.size(), e.bytes_done());
    EXPECT_EQ(find_mismatch({data.data(), e.bytes_done()}, 2, 0), std::nullopt);
  }
}

// Larger than one syscall (1 GiB) and than the kernel's ~2 GiB per-call
// cap: a sparse file read in one call returns every byte.
TEST(File, ReadsAboveTheSingleSyscallLimit) {
  TempDir dir;
  const auto path = dir / "sparse";
  constexpr std::uint64_t kSize = (std::uint64_t{2} << 30) + 8192;
  test::write_sparse_file(path, kSize, 8192, 5);
  File f(path, O_RDONLY);
  AlignedBuffer buf(kSize);
  EXPECT_EQ(f.read(buf.span(), 0), kSize);
  EXPECT_EQ(find_mismatch({buf.data() + kSize - 8192, 8192}, 5, kSize - 8192), std::nullopt);
  EXPECT_EQ(buf.data()[0], std::byte{0});
  EXPECT_EQ(buf.data()[kSize / 2], std::byte{0});
}

TEST(File, MoveLeavesTheSourceClosed) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 4096, 1);
  File a(dir / "f", O_RDONLY);
  const int fd = a.fd();
  File b(std::move(a));
  EXPECT_EQ(b.fd(), fd);
  EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  AlignedBuffer buf(4096);
  expect_error(EBADF, {"closed"}, [&] { (void)a.read(buf.span(), 0); });  // NOLINT
}

}  // namespace
}  // namespace phx

namespace phx {
namespace {

TEST(File, TruncateSetsTheSizeAndRejectsImpossibleSizes) {
  TempDir dir;
  File f(dir / "t", O_RDWR | O_CREAT);
  f.truncate(123457);
  EXPECT_EQ(f.size(), 123457U);
  f.truncate(0);
  EXPECT_EQ(f.size(), 0U);
  expect_error(EINVAL, {"truncate", (dir / "t").string()},
               [&] { f.truncate(std::uint64_t{1} << 63); });
}

}  // namespace
}  // namespace phx

namespace phx {
namespace {

TEST(File, ReadOnlyFilesystemRefusesWritesAndServesReads) {
  std::string why;
  auto mnt = test::ScratchMount::make("tmpfs", "size=4m", why);
  if (!mnt) {
    GTEST_SKIP() << why;
  }
  const auto path = mnt->path() / "f";
  test::write_pattern_file(path, 100000, 4);
  ASSERT_EQ(::mount(nullptr, mnt->path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  expect_error(EROFS, {"open " + path.string()}, [&] { File f(path, O_RDWR); });
  expect_error(EROFS, {"open " + path.string()}, [&] { File f(path, O_WRONLY); });
  File f(path, O_RDONLY);
  AlignedBuffer buf(100000);
  EXPECT_EQ(f.read(buf.span(), 0), 100000U);
  EXPECT_EQ(find_mismatch(buf.span(), 4, 0), std::nullopt);
  expect_error(EBADF, {"write " + path.string(), "offset 0, size 4096"},
               [&] { (void)f.write(buf.span().first(4096), 0); });
}

}  // namespace
}  // namespace phx
