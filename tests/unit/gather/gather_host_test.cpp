// SPDX-License-Identifier: MIT
// phx::Gather on the host engine: data checked byte for byte after gathers
// of every batch size (below, at and beyond the ring, beyond 256, huge),
// scatters (write direction), per-entry failures (end of file, a directory,
// a read-only file), asynchronous completion and argument errors.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>

#include "phoenix/gather.hpp"
#include "test_support.hpp"
#if PHX_WITH_CUDA
#include "cuda/driver_api.hpp"
#endif

namespace phx {
namespace {

using test::AlignedBuffer;
using test::find_mismatch;
using test::TempDir;

constexpr std::uint64_t kSeed = 11;

// Slot i receives file block blocks[i]; every slot checked against the pattern.
void expect_slots_hold(const AlignedBuffer &mem, std::size_t block,
                       const std::vector<std::uint64_t> &blocks) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto bad = find_mismatch({mem.data() + i * block, block}, kSeed, blocks[i] * block);
    ASSERT_FALSE(bad.has_value()) << "slot " << i << " (file block " << blocks[i]
                                  << ") differs at file offset " << *bad;
  }
}

// Two gathers into a pool of 2n slots: the first reads file blocks 2n-1
// down to n into slots 0..n-1, the second blocks 0..n-1 into slots n..2n-1.
struct TwoBatches {
  std::vector<std::uint64_t> first, second, first_slots, second_slots;
  explicit TwoBatches(std::size_t n) : first(n), second(n), first_slots(n), second_slots(n) {
    for (std::size_t i = 0; i < n; ++i) {
      first[i] = 2 * n - 1 - i;
      second[i] = i;
      first_slots[i] = i;
      second_slots[i] = n + i;
    }
  }
  /// File block per slot, slots 0..2n-1.
  [[nodiscard]] std::vector<std::uint64_t> all() const {
    std::vector<std::uint64_t> blocks = first;
    blocks.insert(blocks.end(), second.begin(), second.end());
    return blocks;
  }
};

struct BatchCase {
  std::size_t entries;
  std::size_t block;
  unsigned depth;
  bool shuffled;
};

// Readable names in ctest's listing.
void PrintTo(const BatchCase &c, std::ostream *os) {
  *os << c.entries << "x" << c.block << " depth " << c.depth
      << (c.shuffled ? " shuffled" : " in order");
}

class GatherBatch : public ::testing::TestWithParam<BatchCase> {};

INSTANTIATE_TEST_SUITE_P(
    Sizes, GatherBatch,
    ::testing::Values(BatchCase{1, 16384, 8, false}, BatchCase{7, 16384, 8, true},
                      BatchCase{8, 8192, 8, true}, BatchCase{9, 8192, 8, true},
                      BatchCase{256, 16384, 32, true}, BatchCase{257, 16384, 32, true},
                      BatchCase{1000, 8192, 16, true}, BatchCase{5000, 4096, 64, true},
                      BatchCase{300, 65536, 8, false}),
    [](const ::testing::TestParamInfo<BatchCase> &param_info) {
      const BatchCase &c = param_info.param;
      return std::to_string(c.entries) + "x" + std::to_string(c.block) + "_depth" +
             std::to_string(c.depth) + (c.shuffled ? "_shuffled" : "_in_order");
    });

TEST_P(GatherBatch, EverySlotGetsItsBlock) {
  const BatchCase c = GetParam();
  TempDir dir;
  test::write_pattern_file(dir / "kv", c.entries * c.block, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(c.entries * c.block);
  auto pool = dev.register_memory(mem.data(), mem.size());
  std::vector<std::uint64_t> blocks(c.entries);
  std::vector<std::uint64_t> slots(c.entries);
  for (std::size_t i = 0; i < c.entries; ++i) {
    blocks[i] = i;
    slots[i] = i;
  }
  if (c.shuffled) {
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(c.entries));
  }
  Gather gather(dev, {.queue_depth = c.depth});
  const GatherResult r = gather.read(paged_blocks(file, pool, c.block, blocks, slots));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.entries, c.entries);
  EXPECT_EQ(r.bytes, c.entries * c.block);
  if (!c.shuffled) {
    // Contiguous both ways: 1 MiB requests.
    EXPECT_EQ(r.requests, (c.entries * c.block + (1U << 20) - 1) / (1U << 20));
  }
  expect_slots_hold(mem, c.block, blocks);
}

TEST(GatherHost, HugeEntryIsSplitAndArrivesWhole) {
  constexpr std::size_t kSize = (std::size_t{24} << 20) + std::size_t{4096} * 3;
  TempDir dir;
  test::write_pattern_file(dir / "kv", kSize, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(kSize);
  auto reg = dev.register_memory(mem.data(), mem.size());
  Gather gather(dev, {.max_request = std::size_t{1} << 20, .queue_depth = 4});
  const std::vector<GatherEntry> e = {{&file, &reg, 0, 0, kSize}};
  const GatherResult r = gather.read(e);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.requests, 25U);
  EXPECT_EQ(r.bytes, kSize);
  EXPECT_FALSE(find_mismatch(mem.span(), kSeed, 0).has_value());
}

TEST(GatherHost, BlocksPastEndOfFileFailAloneInsideAMergedRun) {
  constexpr std::size_t kBlock = 16384;
  TempDir dir;
  // 7.5 blocks: block 7 is half there, blocks 8 and 9 not at all.
  test::write_pattern_file(dir / "kv", 7 * kBlock + kBlock / 2, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(10 * kBlock);
  std::memset(mem.data(), 0xee, mem.size());
  auto pool = dev.register_memory(mem.data(), mem.size());
  std::vector<std::uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  Gather gather(dev);
  const GatherResult r = gather.read(paged_blocks(file, pool, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), 3U);
  EXPECT_EQ(r.failures[0].index, 7U);
  EXPECT_EQ(r.failures[0].error, 0);  // end of file, not an error
  EXPECT_EQ(r.failures[0].bytes, kBlock / 2);
  EXPECT_EQ(r.failures[1].index, 8U);
  EXPECT_EQ(r.failures[1].bytes, 0U);
  EXPECT_EQ(r.failures[2].index, 9U);
  EXPECT_EQ(r.bytes, 7 * kBlock + kBlock / 2);
  EXPECT_EQ(r.requests, 4U);  // one merged request, then 7, 8, 9 alone
  expect_slots_hold(mem, kBlock, {0, 1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(find_mismatch({mem.data() + 7 * kBlock, kBlock / 2}, kSeed, 7 * kBlock));
}

TEST(GatherHost, EntriesOnAFailingFileReportItsErrnoOthersSucceed) {
  constexpr std::size_t kBlock = 8192;
  TempDir dir;
  test::write_pattern_file(dir / "kv", 4 * kBlock, kSeed);
  File good(dir / "kv", O_RDONLY);
  // Write-only and buffered (no read-modify-write upgrade): every read is EBADF.
  File bad(dir / "write-only", O_WRONLY | O_CREAT, 0600, DirectIo::off);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(6 * kBlock);
  auto pool = dev.register_memory(mem.data(), mem.size());
  const std::vector<GatherEntry> e = {{&good, &pool, 0, 0, kBlock},
                                      {&bad, &pool, kBlock, kBlock, kBlock},
                                      {&good, &pool, 2 * kBlock, 2 * kBlock, kBlock},
                                      {&bad, &pool, 3 * kBlock, 0, kBlock},
                                      {&good, &pool, 4 * kBlock, 3 * kBlock, kBlock}};
  Gather gather(dev);
  const GatherResult r = gather.read(e);
  ASSERT_EQ(r.failures.size(), 2U);
  EXPECT_EQ(r.failures[0].index, 1U);
  EXPECT_EQ(r.failures[0].error, EBADF);
  EXPECT_EQ(r.failures[1].index, 3U);
  EXPECT_EQ(r.failures[1].error, EBADF);
  EXPECT_EQ(r.bytes, 3 * kBlock);
  EXPECT_FALSE(find_mismatch({mem.data(), kBlock}, kSeed, 0));
  EXPECT_FALSE(find_mismatch({mem.data() + 2 * kBlock, kBlock}, kSeed, 2 * kBlock));
  EXPECT_FALSE(find_mismatch({mem.data() + 4 * kBlock, kBlock}, kSeed, 3 * kBlock));
}

TEST(GatherHost, ScatterWritesEveryBlockWhereItBelongs) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 300;
  TempDir dir;
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(kCount * kBlock);
  // Slot i holds what file block blocks[i] must contain.
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = i;
    slots[i] = i;
  }
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(5));
  for (std::size_t i = 0; i < kCount; ++i) {
    test::fill_pattern({mem.data() + i * kBlock, kBlock}, kSeed, blocks[i] * kBlock);
  }
  auto pool = dev.register_memory(mem.data(), mem.size());
  {
    File file(dir / "kv", O_RDWR | O_CREAT);
    Gather gather(dev, {.queue_depth = 16});
    const GatherResult r = gather.write(paged_blocks(file, pool, kBlock, blocks, slots));
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.bytes, kCount * kBlock);
  }
  const auto data = test::read_whole_file(dir / "kv");
  ASSERT_EQ(data.size(), kCount * kBlock);
  EXPECT_FALSE(find_mismatch(data, kSeed, 0).has_value());
}

TEST(GatherHost, WriteToAReadOnlyFileFailsEveryEntryWithEbadf) {
  constexpr std::size_t kBlock = 4096;
  TempDir dir;
  test::write_pattern_file(dir / "kv", 4 * kBlock, kSeed);
  File ro(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(2 * kBlock);
  auto pool = dev.register_memory(mem.data(), mem.size());
  const std::vector<std::uint64_t> ids = {0, 1};
  Gather gather(dev);
  const GatherResult r = gather.write(paged_blocks(ro, pool, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), 2U);
  EXPECT_EQ(r.failures[0].error, EBADF);
  EXPECT_EQ(r.failures[1].error, EBADF);
  EXPECT_EQ(r.bytes, 0U);
}

TEST(GatherHost, FutureAndCallbackCompleteInOrder) {
  constexpr std::size_t kBlock = 8192;
  TempDir dir;
  test::write_pattern_file(dir / "kv", 64 * kBlock, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(64 * kBlock);
  auto pool = dev.register_memory(mem.data(), mem.size());
  const TwoBatches b(32);
  Gather gather(dev);
  std::future<GatherResult> f =
      gather.read_async(paged_blocks(file, pool, kBlock, b.first, b.first_slots));
  std::promise<GatherResult> called;
  gather.read_async(paged_blocks(file, pool, kBlock, b.second, b.second_slots),
                    [&called](GatherResult r) { called.set_value(std::move(r)); });
  const GatherResult one = f.get();
  const GatherResult two = called.get_future().get();
  EXPECT_TRUE(one.ok());
  EXPECT_TRUE(two.ok());
  EXPECT_EQ(one.bytes + two.bytes, 64 * kBlock);
  expect_slots_hold(mem, kBlock, b.all());
}

// The errno @p call throws when made from a callback of a gather whose
// entries are @p e (0 when it does not throw).
int errno_inside_callback(
    const std::function<void(Gather &, const std::vector<GatherEntry> &)> &call) {
  TempDir dir;
  test::write_pattern_file(dir / "kv", 4096, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(4096);
  auto reg = dev.register_memory(mem.data(), mem.size());
  Gather gather(dev);
  std::promise<int> inner;
  const std::vector<GatherEntry> e = {{&file, &reg, 0, 0, 4096}};
  gather.read_async(e, [&](const GatherResult &) {
    try {
      call(gather, e);
      inner.set_value(0);
    } catch (const std::system_error &err) {
      inner.set_value(err.code().value());
    }
  });
  return inner.get_future().get();
}

TEST(GatherHost, SynchronousCallFromACallbackIsEdeadlk) {
  EXPECT_EQ(
      errno_inside_callback([](Gather &g, const std::vector<GatherEntry> &e) { (void)g.read(e); }),
      EDEADLK);
}

TEST(GatherHost, EntryAtTranslatesDeviceAddresses) {
  TempDir dir;
  test::write_pattern_file(dir / "kv", 8192, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(16384);
  auto reg = dev.register_memory(mem.data(), mem.size());
  const GatherEntry e = entry_at(file, reg, mem.data() + 4096, 8192, 0);
  EXPECT_EQ(e.reg_offset, 4096U);
  try {
    (void)entry_at(file, reg, mem.data() + 12288, 8192, 0);
    FAIL() << "an address range past the registration was accepted";
  } catch (const std::system_error &err) {
    EXPECT_EQ(err.code().value(), EINVAL);
  }
}

TEST(GatherHost, MalformedEntriesAreRejectedBeforeAnyIo) {
  TempDir dir;
  test::write_pattern_file(dir / "kv", 8192, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(8192);
  auto reg = dev.register_memory(mem.data(), mem.size());
  Gather gather(dev);
  const auto expect_einval = [&gather](std::vector<GatherEntry> e, const char *what) {
    try {
      (void)gather.read(e);
      ADD_FAILURE() << what << " was accepted";
    } catch (const std::system_error &err) {
      EXPECT_EQ(err.code().value(), EINVAL) << what;
      EXPECT_NE(std::string(err.what()).find("entry 1"), std::string::npos) << err.what();
    }
  };
  expect_einval({{&file, &reg, 0, 0, 4096}, {&file, &reg, 4096, 0, 8192}}, "past the registration");
  expect_einval({{&file, &reg, 0, 0, 4096}, {nullptr, &reg, 0, 0, 4096}}, "no file");
  expect_einval({{&file, &reg, 0, 0, 4096}, {&file, nullptr, 0, 0, 4096}}, "no registration");
  const std::vector<std::uint64_t> one = {0};
  const std::vector<std::uint64_t> two = {0, 1};
  EXPECT_THROW((void)paged_blocks(file, reg, 4096, one, two), std::system_error);
  const std::vector<std::uint64_t> outside = {2};
  EXPECT_THROW((void)paged_blocks(file, reg, 4096, one, outside), std::system_error);
}

TEST(GatherHost, PrepareWaitsForEarlierOperationsAndLaterOnesStillRun) {
  constexpr std::size_t kBlock = 8192;
  TempDir dir;
  test::write_pattern_file(dir / "kv", 16 * kBlock, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(16 * kBlock);
  auto pool = dev.register_memory(mem.data(), mem.size());
  const TwoBatches b(8);
  Gather gather(dev, {.queue_depth = 4});
  gather.prepare();  // on a fresh Gather: sets up the ring alone
  std::future<GatherResult> pending =
      gather.read_async(paged_blocks(file, pool, kBlock, b.first, b.first_slots));
  gather.prepare();  // queued behind the read: returns after it
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_TRUE(pending.get().ok());
  const GatherResult r = gather.read(paged_blocks(file, pool, kBlock, b.second, b.second_slots));
  EXPECT_TRUE(r.ok());
  expect_slots_hold(mem, kBlock, b.all());
}

TEST(GatherHost, PrepareFromACallbackIsEdeadlk) {
  EXPECT_EQ(errno_inside_callback([](Gather &g, const std::vector<GatherEntry> &) { g.prepare(); }),
            EDEADLK);
}

TEST(GatherHost, StreamOrderedWithoutCudaIsEnotsup) {
#if PHX_WITH_CUDA
  if (detail::cuda::driver() != nullptr) {
    GTEST_SKIP() << "a CUDA driver is present; tests/gpu/gpu_gather_test.cpp covers streams";
  }
#endif
  TempDir dir;
  test::write_pattern_file(dir / "kv", 4096, kSeed);
  File file(dir / "kv", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(4096);
  auto reg = dev.register_memory(mem.data(), mem.size());
  Gather gather(dev);
  GatherResult r;
  try {
    gather.read_on_stream({{&file, &reg, 0, 0, 4096}}, &r, nullptr);
    FAIL() << "stream-ordered gather without CUDA succeeded";
  } catch (const std::system_error &err) {
    EXPECT_EQ(err.code().value(), ENOTSUP);
  }
}

TEST(GatherHost, MovedFromGatherIsEinval) {
  auto dev = Device::open(0, Engine::host);
  Gather a(dev, {.queue_depth = 12});
  const Gather b(std::move(a));
  EXPECT_EQ(b.options().queue_depth, 12U);
  try {
    // NOLINTNEXTLINE(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the point of the test
    (void)a.options();
    FAIL() << "a moved-from Gather answered";
  } catch (const std::system_error &err) {
    EXPECT_EQ(err.code().value(), EINVAL);
  }
}

TEST(GatherHost, MalformedOptionsAreEinval) {
  auto dev = Device::open(0, Engine::host);
  for (const GatherOptions &o : {GatherOptions{.queue_depth = 40000},
                                 GatherOptions{.max_request = (std::size_t{1} << 30) + 1}}) {
    try {
      const Gather g(dev, o);
      ADD_FAILURE() << "accepted depth " << o.queue_depth << ", max_request " << o.max_request;
    } catch (const std::system_error &err) {
      EXPECT_EQ(err.code().value(), EINVAL);
    }
  }
}

}  // namespace
}  // namespace phx
