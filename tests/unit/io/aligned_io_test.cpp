// SPDX-License-Identifier: MIT
// The full-size transfer engine against real files, with and without
// O_DIRECT: every size and alignment class, end of file, splitting, writes
// that extend files, concurrency, and the errors a full or read-only
// filesystem gives.
#include "io/aligned_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/options.hpp"
#include "io/file_caps.hpp"
#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx::detail {
namespace {

using test::AlignedBuffer;
using test::find_mismatch;
using test::TempDir;

class Fd {
 public:
  Fd(const std::filesystem::path &path, int flags, mode_t mode = 0644)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {  // NOLINT
    if (fd_ < 0) {
      throw std::system_error(errno, std::system_category(), "open " + path.string());
    }
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&) = delete;
  Fd &operator=(Fd &&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

std::uint64_t size_on_disk(const std::filesystem::path &path) {
  struct stat st = {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return static_cast<std::uint64_t>(st.st_size);
}

// Runs every test with and without O_DIRECT.
class AlignedIo : public ::testing::TestWithParam<bool> {
 protected:
  [[nodiscard]] bool direct() const { return GetParam(); }
  [[nodiscard]] int flags(int access) const { return access | (direct() ? O_DIRECT : 0); }
  [[nodiscard]] static IoPolicy policy(int fd) {
    IoPolicy p;
    EXPECT_TRUE(policy_for_fd(fd, p));
    return p;
  }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Modes, AlignedIo, ::testing::Bool(),
                         [](const auto &p) { return p.param ? "Direct" : "Buffered"; });

TEST_P(AlignedIo, PolicyReflectsDescriptor) {
  const auto path = dir_ / "f";
  test::write_pattern_file(path, 4096, 1);
  const Fd fd(path, flags(O_RDONLY));
  const IoPolicy p = policy(fd.get());
  EXPECT_EQ(p.direct, direct());
  if (direct()) {
    EXPECT_GE(p.offset_align, 512U);
    EXPECT_GE(p.memory_align, 1U);
  } else {
    EXPECT_EQ(p.offset_align, 1U);
  }
}

TEST_P(AlignedIo, ReadsEverySizeAndAlignmentClass) {
  constexpr std::uint64_t kFileSize = 12 << 20;
  const auto path = dir_ / "f";
  test::write_pattern_file(path, kFileSize, 7);
  const Fd fd(path, flags(O_RDONLY));
  const IoPolicy p = policy(fd.get());
  AlignedBuffer buf((9 << 20) + 4096);
  for (std::size_t size : {std::size_t{1}, std::size_t{511}, std::size_t{512}, std::size_t{4095},
                           std::size_t{4096}, std::size_t{4097}, std::size_t{65539},
                           std::size_t{(1 << 20) + 1}, std::size_t{(8 << 20) - 7}}) {
    for (std::size_t mem_shift : {0, 1, 512}) {
      for (std::uint64_t off : {0, 1, 4095, 4096, 12345}) {
        std::memset(buf.data(), 0xEE, buf.size());
        const auto r = transfer(Direction::read, fd.get(), buf.data() + mem_shift, size, off, p);
        ASSERT_EQ(r.error, 0) << "size " << size << " shift " << mem_shift << " off " << off;
        ASSERT_EQ(r.done, size);
        ASSERT_EQ(find_mismatch({buf.data() + mem_shift, size}, 7, off), std::nullopt)
            << "size " << size << " shift " << mem_shift << " off " << off;
        // Nothing outside the target range was touched.
        if (mem_shift > 0) {
          ASSERT_EQ(buf.data()[mem_shift - 1], std::byte{0xEE});
        }
        ASSERT_EQ(buf.data()[mem_shift + size], std::byte{0xEE});
      }
    }
  }
}

TEST_P(AlignedIo, Reads256MiBAlignedAndUnaligned) {
  constexpr std::uint64_t kSize = 256 << 20;
  const auto path = dir_ / "big";
  test::write_pattern_file(path, kSize + 4096, 3);
  const Fd fd(path, flags(O_RDONLY));
  AlignedBuffer buf(kSize + 4096);
  auto r = transfer(Direction::read, fd.get(), buf.data(), kSize, 0, policy(fd.get()));
  ASSERT_EQ(r.error, 0);
  ASSERT_EQ(r.done, kSize);
  EXPECT_EQ(find_mismatch({buf.data(), kSize}, 3, 0), std::nullopt);
  r = transfer(Direction::read, fd.get(), buf.data() + 3, kSize, 1, policy(fd.get()));
  ASSERT_EQ(r.error, 0);
  ASSERT_EQ(r.done, kSize);
  EXPECT_EQ(find_mismatch({buf.data() + 3, kSize}, 3, 1), std::nullopt);
}

TEST_P(AlignedIo, RandomReads) {
  constexpr std::uint64_t kFileSize = 8 << 20;
  const auto path = dir_ / "f";
  test::write_pattern_file(path, kFileSize, 11);
  const Fd fd(path, flags(O_RDONLY));
  const IoPolicy p = policy(fd.get());
  AlignedBuffer buf(kFileSize + 8192);
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t off = rng() % kFileSize;
    const std::size_t size = 1 + rng() % (kFileSize - off);
    const std::size_t shift = rng() % 4096;
    const auto r = transfer(Direction::read, fd.get(), buf.data() + shift, size, off, p);
    ASSERT_EQ(r.error, 0);
    ASSERT_EQ(r.done, size);
    ASSERT_EQ(find_mismatch({buf.data() + shift, size}, 11, off), std::nullopt)
        << "off " << off << " size " << size << " shift " << shift;
  }
}

TEST_P(AlignedIo, EndOfFileGivesShortCount) {
  constexpr std::uint64_t kFileSize = 3 * 4096 + 100;
  const auto path = dir_ / "short";
  test::write_pattern_file(path, kFileSize, 5);
  const Fd fd(path, flags(O_RDONLY));
  const IoPolicy p = policy(fd.get());
  AlignedBuffer buf(64 << 10);
  struct Case {
    std::uint64_t off;
    std::size_t size;
    std::size_t expect;
  };
  for (const Case c : {Case{0, 4 * 4096, kFileSize}, Case{0, 64 << 10, kFileSize},
                       Case{4096, 8192 + 4096, kFileSize - 4096}, Case{kFileSize - 10, 4096, 10},
                       Case{kFileSize - 1, 1, 1}, Case{kFileSize, 4096, 0},
                       Case{kFileSize + 5000, 100, 0}, Case{1 << 20, 4096, 0}}) {
    const auto r = transfer(Direction::read, fd.get(), buf.data(), c.size, c.off, p);
    ASSERT_EQ(r.error, 0) << c.off;
    ASSERT_EQ(r.done, c.expect) << "off " << c.off << " size " << c.size;
    ASSERT_EQ(find_mismatch({buf.data(), r.done}, 5, c.off), std::nullopt);
  }
}

TEST_P(AlignedIo, SplitsAtTheSyscallLimit) {
  const auto path = dir_ / "f";
  test::write_pattern_file(path, 1 << 20, 9);
  const Fd fd(path, flags(O_RDONLY));
  IoPolicy p = policy(fd.get());
  p.max_syscall = 8192;
  p.chunk_size = 4096;
  AlignedBuffer buf((1 << 20) + 4096);
  auto r = transfer(Direction::read, fd.get(), buf.data(), 1 << 20, 0, p);
  ASSERT_EQ(r.done, 1U << 20);
  EXPECT_EQ(find_mismatch({buf.data(), 1 << 20}, 9, 0), std::nullopt);
  r = transfer(Direction::read, fd.get(), buf.data() + 1, (1 << 20) - 4096, 4096, p);
  ASSERT_EQ(r.done, (1U << 20) - 4096);
  EXPECT_EQ(find_mismatch({buf.data() + 1, (1 << 20) - 4096}, 9, 4096), std::nullopt);
}

// Writes of every alignment class into an existing file leave exactly the
// written range changed and the size unchanged.
TEST_P(AlignedIo, WritesEverySizeAndAlignmentClass) {
  constexpr std::uint64_t kFileSize = 4 << 20;
  const auto path = dir_ / "w";
  AlignedBuffer src((2 << 20) + 8192);
  for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{4097},
                           std::size_t{65536 + 513}, std::size_t{2 << 20}}) {
    for (std::size_t mem_shift : {0, 3}) {
      for (std::uint64_t off : {0, 7, 4096, 8191, 1 << 20}) {
        test::write_pattern_file(path, kFileSize, 1);
        {
          const Fd fd(path, flags(O_RDWR));
          test::fill_pattern({src.data() + mem_shift, size}, 2, off);
          const auto r = transfer(Direction::write, fd.get(), src.data() + mem_shift, size, off,
                                  policy(fd.get()));
          ASSERT_EQ(r.error, 0);
          ASSERT_EQ(r.done, size);
        }
        const auto data = test::read_whole_file(path);
        ASSERT_EQ(data.size(), kFileSize) << "size " << size << " off " << off;
        ASSERT_EQ(find_mismatch({data.data(), off}, 1, 0), std::nullopt);
        ASSERT_EQ(find_mismatch({data.data() + off, size}, 2, off), std::nullopt)
            << "size " << size << " shift " << mem_shift << " off " << off;
        ASSERT_EQ(find_mismatch({data.data() + off + size, kFileSize - off - size}, 1, off + size),
                  std::nullopt);
      }
    }
  }
}

// A write past the end of file leaves the file exactly offset + size long,
// with the gap reading as zeros, even when the tail went through a staged
// whole-block read-modify-write.
TEST_P(AlignedIo, WritePastEndSetsExactSize) {
  const auto path = dir_ / "grow";
  for (std::uint64_t initial : {0, 100, 4096, 5000}) {
    for (std::uint64_t off : {0, 50, 4096, 6000, 20000}) {
      for (std::size_t size : {std::size_t{1}, std::size_t{3000}, std::size_t{8192}}) {
        if (off > initial + 100000) {
          continue;
        }
        test::write_pattern_file(path, initial, 1);
        AlignedBuffer src(16384);
        test::fill_pattern({src.data(), size}, 2, off);
        {
          const Fd fd(path, flags(O_RDWR));
          const auto r =
              transfer(Direction::write, fd.get(), src.data(), size, off, policy(fd.get()));
          ASSERT_EQ(r.error, 0);
          ASSERT_EQ(r.done, size);
        }
        const std::uint64_t expect_size = std::max<std::uint64_t>(initial, off + size);
        ASSERT_EQ(size_on_disk(path), expect_size)
            << "initial " << initial << " off " << off << " size " << size;
        const auto data = test::read_whole_file(path);
        const std::uint64_t keep = std::min(initial, off);
        ASSERT_EQ(find_mismatch({data.data(), keep}, 1, 0), std::nullopt);
        for (std::uint64_t i = initial; i < off; ++i) {
          ASSERT_EQ(data[i], std::byte{0}) << "gap byte " << i;
        }
        ASSERT_EQ(find_mismatch({data.data() + off, size}, 2, off), std::nullopt);
        if (initial > off + size) {
          ASSERT_EQ(find_mismatch({data.data() + off + size, initial - off - size}, 1, off + size),
                    std::nullopt);
        }
      }
    }
  }
}

TEST_P(AlignedIo, ConcurrentReadsAndBlockDisjointWrites) {
  constexpr std::uint64_t kFileSize = 16 << 20;
  const auto path = dir_ / "c";
  test::write_pattern_file(path, kFileSize, 4);
  const Fd fd(path, flags(O_RDWR));
  const IoPolicy p = policy(fd.get());
  constexpr int kThreads = 8;
  constexpr std::uint64_t kSlice = kFileSize / kThreads;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 100);
      AlignedBuffer buf(kSlice + 4096);
      for (int i = 0; i < 50; ++i) {
        const std::uint64_t off = rng() % kFileSize;
        const std::size_t size = 1 + rng() % std::min<std::uint64_t>(kFileSize - off, 1 << 20);
        const auto r = transfer(Direction::read, fd.get(), buf.data() + 1, size, off, p);
        if (r.error != 0 || r.done != size ||
            find_mismatch({buf.data() + 1, size}, 4, off).has_value()) {
          // Reads race with the writes below, which rewrite slices with
          // the same pattern and seed, so the content never changes.
          failures.fetch_add(1);
        }
      }
      // Unaligned writes inside this thread's own 4 KiB-aligned slice.
      const std::uint64_t base = kSlice * static_cast<std::uint64_t>(t);
      test::fill_pattern({buf.data() + 5, kSlice - 10}, 4, base + 5);
      const auto r = transfer(Direction::write, fd.get(), buf.data() + 5, kSlice - 10, base + 5, p);
      if (r.error != 0 || r.done != kSlice - 10) {
        failures.fetch_add(1);
      }
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(find_mismatch(test::read_whole_file(path), 4, 0), std::nullopt);
}

// Unaligned neighbours: two threads write the two halves of the same blocks
// (no byte in common), so with O_DIRECT each read-modify-writes every block
// the other is writing too.  Each round writes a new seed; a block written
// back as it was read before the other half landed leaves that half with
// the previous round's bytes.
TEST_P(AlignedIo, ConcurrentWritesSharingBlocksLoseNothing) {
  const auto path = dir_ / "neighbours";
  constexpr std::uint64_t kBlocks = 32;
  constexpr int kRounds = 60;
  test::write_pattern_file(path, 4096, 0);
  const Fd fd(path, flags(O_RDWR));
  const IoPolicy p = policy(fd.get());
  // O_DIRECT's block (halves of it are unaligned); any size when buffered.
  const std::size_t block = p.offset_align > 1 ? p.offset_align : 4096;
  const std::size_t half = block / 2;
  test::write_pattern_file(path, kBlocks * block, 0);
  // Two writers and this thread: the writers finish a round, this thread
  // checks the file, then all start the next.
  std::barrier sync(3);
  std::atomic<int> failures{0};
  const auto writer = [&](std::uint64_t side) {
    AlignedBuffer buf(half);
    for (int round = 1; round <= kRounds; ++round) {
      for (std::uint64_t k = 0; k < kBlocks; ++k) {
        const std::uint64_t off = k * block + side * half;
        test::fill_pattern({buf.data(), half}, static_cast<std::uint64_t>(round), off);
        const auto r = transfer(Direction::write, fd.get(), buf.data(), half, off, p);
        if (r.error != 0 || r.done != half) {
          failures.fetch_add(1);
        }
      }
      sync.arrive_and_wait();
      sync.arrive_and_wait();
    }
  };
  std::thread first(writer, 0);
  std::thread second(writer, 1);
  int lost_rounds = 0;
  std::string first_loss;
  for (int round = 1; round <= kRounds; ++round) {
    sync.arrive_and_wait();
    const auto found =
        find_mismatch(test::read_whole_file(path), static_cast<std::uint64_t>(round), 0);
    if (found.has_value() && lost_rounds++ == 0) {
      first_loss = "round " + std::to_string(round) + ", byte " + std::to_string(*found);
    }
    sync.arrive_and_wait();
  }
  first.join();
  second.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(lost_rounds, 0) << "a neighbour's bytes were written back stale; first at "
                            << first_loss;
}

TEST_P(AlignedIo, WriteOnReadOnlyDescriptorIsEbadf) {
  const auto path = dir_ / "ro";
  test::write_pattern_file(path, 8192, 1);
  const Fd fd(path, flags(O_RDONLY));
  AlignedBuffer buf(8192);
  for (std::uint64_t off : {0, 1}) {
    const auto r = transfer(Direction::write, fd.get(), buf.data(), 4096, off, policy(fd.get()));
    EXPECT_EQ(r.error, EBADF);
    EXPECT_EQ(r.done, 0U);
  }
  EXPECT_EQ(find_mismatch(test::read_whole_file(path), 1, 0), std::nullopt);
}

TEST_P(AlignedIo, ReadOnWriteOnlyDescriptorIsEbadf) {
  const auto path = dir_ / "wo";
  test::write_pattern_file(path, 8192, 1);
  const Fd fd(path, flags(O_WRONLY));
  AlignedBuffer buf(8192);
  const auto r = transfer(Direction::read, fd.get(), buf.data(), 4096, 0, policy(fd.get()));
  EXPECT_EQ(r.error, EBADF);
}

TEST_P(AlignedIo, BadDescriptorIsEbadf) {
  AlignedBuffer buf(4096);
  IoPolicy p;
  p.direct = direct();
  p.offset_align = p.memory_align = direct() ? 4096 : 1;
  const auto r = transfer(Direction::read, 12345, buf.data(), 4096, 0, p);
  EXPECT_EQ(r.error, EBADF);
  EXPECT_FALSE(policy_for_fd(12345, p));
  EXPECT_EQ(errno, EBADF);
}

// A full filesystem: the write reports ENOSPC and how much it wrote, and
// the bytes it reports as written are really in the file.
TEST_P(AlignedIo, FullFilesystemReportsEnospcAndKeepsWhatWasWritten) {
  std::string why;
  auto mnt = test::ScratchMount::make("tmpfs", "size=1m", why);
  if (!mnt) {
    GTEST_SKIP() << why;
  }
  const auto path = mnt->path() / "fill";
  const int fd = ::open(path.c_str(), flags(O_RDWR | O_CREAT) | O_CLOEXEC, 0644);  // NOLINT
  if (fd < 0 && errno == EINVAL && direct()) {
    GTEST_SKIP() << "this kernel's tmpfs has no O_DIRECT";
  }
  ASSERT_GE(fd, 0);
  AlignedBuffer src(4 << 20);
  test::fill_pattern(src.span(), 6, 0);
  const auto r = transfer(Direction::write, fd, src.data(), src.size(), 0, policy(fd));
  ::close(fd);
  EXPECT_EQ(r.error, ENOSPC);
  EXPECT_LT(r.done, src.size());
  const auto data = test::read_whole_file(path);
  ASSERT_GE(data.size(), r.done);
  EXPECT_EQ(find_mismatch({data.data(), r.done}, 6, 0), std::nullopt);
}

}  // namespace
}  // namespace phx::detail

namespace phx::detail {
namespace {

// PHX_STAGING_SIZE sizes the bounce steps for misaligned memory; a malformed
// value fails only the requests that need bouncing, with EINVAL.
TEST(AlignedIoChunk, ChunkSizeFromEnvironment) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 1 << 20, 13);
  const Fd fd(dir / "f", O_RDONLY | O_DIRECT);
  IoPolicy p;
  ASSERT_TRUE(policy_for_fd(fd.get(), p));
  AlignedBuffer buf((1 << 20) + 4096);
  ::setenv("PHX_STAGING_SIZE", "8K", 1);
  refresh_default_options();
  EXPECT_EQ(Options::defaults().staging_bytes, 8U << 10);
  auto r = transfer(Direction::read, fd.get(), buf.data() + 1, 1 << 20, 0, p);
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.done, 1U << 20);
  EXPECT_EQ(find_mismatch({buf.data() + 1, 1 << 20}, 13, 0), std::nullopt);
  ::setenv("PHX_STAGING_SIZE", "lots", 1);
  refresh_default_options();
  r = transfer(Direction::read, fd.get(), buf.data(), 1 << 20, 0, p);
  EXPECT_EQ(r.error, 0);  // aligned: no bouncing, the variable is not consulted
  EXPECT_EQ(r.done, 1U << 20);
  r = transfer(Direction::read, fd.get(), buf.data() + 1, 1 << 20, 0, p);
  EXPECT_EQ(r.error, EINVAL);
  EXPECT_EQ(r.done, 0U);
  ::unsetenv("PHX_STAGING_SIZE");
  refresh_default_options();
}

}  // namespace
}  // namespace phx::detail
