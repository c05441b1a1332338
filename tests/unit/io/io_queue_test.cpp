// SPDX-License-Identifier: MIT
// IoQueue: batches of 1..4096 requests through io_uring, reads and writes,
// unaligned and oversized requests, end of file and per-request errors.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using test::AlignedBuffer;
using test::find_mismatch;
using test::TempDir;

class IoQueueBatch : public ::testing::TestWithParam<std::size_t> {};

INSTANTIATE_TEST_SUITE_P(Sizes, IoQueueBatch,
                         ::testing::Values(1, 2, 16, 127, 128, 129, 256, 1000, 4096));

// N requests of 4 KiB scattered over the file, gathered into a registration
// in shuffled order; a ring smaller than the batch forces waves.
TEST_P(IoQueueBatch, ReadsEveryRequestIntoItsSlot) {
  const std::size_t n = GetParam();
  constexpr std::size_t kBlock = 4096;
  TempDir dir;
  test::write_pattern_file(dir / "f", n * kBlock, 21);
  File f(dir / "f", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(n * kBlock);
  auto reg = dev.register_memory(mem.data(), mem.size());
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) {
    order[i] = i;
  }
  std::shuffle(order.begin(), order.end(), std::mt19937_64(n));
  std::vector<IoRequest> reqs;
  reqs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Slot i of memory receives file block order[i].
    reqs.push_back(IoRequest::read(f, reg, i * kBlock, kBlock, order[i] * kBlock, i));
  }
  IoQueue q(64);
  const auto done = q.run(reqs);
  ASSERT_EQ(done.size(), n);
  std::vector<bool> seen(n, false);
  for (const auto &c : done) {
    ASSERT_LT(c.user_data, n);
    EXPECT_FALSE(seen[c.user_data]);
    seen[c.user_data] = true;
    EXPECT_EQ(c.error, 0);
    EXPECT_EQ(c.bytes, kBlock);
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(find_mismatch({mem.data() + i * kBlock, kBlock}, 21, order[i] * kBlock), std::nullopt)
        << "slot " << i;
  }
  EXPECT_EQ(q.outstanding(), 0U);
}

TEST_P(IoQueueBatch, WritesThenReadsBack) {
  const std::size_t n = GetParam();
  constexpr std::size_t kBlock = 8192;
  TempDir dir;
  File f(dir / "w", O_RDWR | O_CREAT);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer src(n * kBlock);
  AlignedBuffer dst(n * kBlock);
  test::fill_pattern(src.span(), 33, 0);
  auto rs = dev.register_memory(src.data(), src.size());
  auto rd = dev.register_memory(dst.data(), dst.size());
  std::vector<IoRequest> writes;
  std::vector<IoRequest> reads;
  for (std::size_t i = 0; i < n; ++i) {
    writes.push_back(IoRequest::write(f, rs, i * kBlock, kBlock, i * kBlock, i));
    reads.push_back(IoRequest::read(f, rd, i * kBlock, kBlock, i * kBlock, i));
  }
  IoQueue q(32);
  for (const auto &c : q.run(writes)) {
    ASSERT_EQ(c.error, 0);
    ASSERT_EQ(c.bytes, kBlock);
  }
  for (const auto &c : q.run(reads)) {
    ASSERT_EQ(c.error, 0);
    ASSERT_EQ(c.bytes, kBlock);
  }
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
}

TEST(IoQueue, UnalignedRequestsAreServedAndVerified) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 1 << 20, 4);
  File f(dir / "f", O_RDONLY);
  ASSERT_TRUE(f.direct_io());
  AlignedBuffer mem(2 << 20);
  std::vector<IoRequest> reqs;
  std::mt19937_64 rng(5);
  std::map<std::uint64_t, std::pair<std::size_t, std::uint64_t>>
      expect;  // ud -> (mem off, file off)
  std::size_t mem_off = 0;
  for (std::uint64_t i = 0; i < 200; ++i) {
    const std::uint64_t off = rng() % (1 << 19);
    const std::size_t size = 1 + rng() % 5000;
    reqs.push_back({IoOp::read, &f, mem.data() + mem_off, size, off, i});
    expect[i] = {mem_off, off};
    mem_off += size + 1;
  }
  IoQueue q(16);
  const auto done = q.run(reqs);
  ASSERT_EQ(done.size(), reqs.size());
  for (const auto &c : done) {
    ASSERT_EQ(c.error, 0);
    const auto &r = reqs[c.user_data];
    ASSERT_EQ(c.bytes, r.size);
    const auto [m, o] = expect[c.user_data];
    ASSERT_EQ(find_mismatch({mem.data() + m, r.size}, 4, o), std::nullopt) << c.user_data;
  }
}

TEST(IoQueue, EndOfFileCompletesShort) {
  TempDir dir;
  constexpr std::uint64_t kSize = 10000;
  test::write_pattern_file(dir / "f", kSize, 6);
  AlignedBuffer mem(64 << 10);
  for (auto mode : {DirectIo::preferred, DirectIo::off}) {
    File f(dir / "f", O_RDONLY, 0, mode);
    std::vector<IoRequest> reqs = {
        {IoOp::read, &f, mem.data(), 16384, 0, 1},
        {IoOp::read, &f, mem.data() + 16384, 4096, 8192, 2},
        {IoOp::read, &f, mem.data() + 20480, 4096, 12288, 3},
    };
    IoQueue q(4);
    for (const auto &c : q.run(reqs)) {
      EXPECT_EQ(c.error, 0);
      const std::size_t expect = c.user_data == 1 ? kSize : c.user_data == 2 ? kSize - 8192 : 0;
      EXPECT_EQ(c.bytes, expect) << "request " << c.user_data;
    }
    EXPECT_EQ(find_mismatch({mem.data(), kSize}, 6, 0), std::nullopt);
    EXPECT_EQ(find_mismatch({mem.data() + 16384, kSize - 8192}, 6, 8192), std::nullopt);
  }
}

TEST(IoQueue, PerRequestErrors) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 8192, 6);
  File ro(dir / "f", O_RDONLY);
  AlignedBuffer mem(16384);
  std::vector<IoRequest> reqs = {
      {IoOp::read, &ro, mem.data(), 4096, 0, 1},      // fine
      {IoOp::write, &ro, mem.data(), 4096, 0, 2},     // read-only file
      {IoOp::read, nullptr, mem.data(), 4096, 0, 3},  // no file
      {IoOp::read, &ro, nullptr, 4096, 0, 4},         // no buffer
      {IoOp::read, &ro, mem.data() + 4096, 0, 0, 5},  // empty
      {IoOp::read, &ro, mem.data() + 8192, 4096, 4096, 6},
  };
  IoQueue q(2);
  std::map<std::uint64_t, IoCompletion> by_id;
  for (const auto &c : q.run(reqs)) {
    by_id[c.user_data] = c;
  }
  ASSERT_EQ(by_id.size(), reqs.size());
  EXPECT_EQ(by_id[1].error, 0);
  EXPECT_EQ(by_id[1].bytes, 4096U);
  EXPECT_EQ(by_id[2].error, EBADF);
  EXPECT_EQ(by_id[3].error, EBADF);
  EXPECT_EQ(by_id[4].error, EFAULT);
  EXPECT_EQ(by_id[5].error, 0);
  EXPECT_EQ(by_id[5].bytes, 0U);
  EXPECT_EQ(by_id[6].error, 0);
  EXPECT_EQ(find_mismatch({mem.data() + 8192, 4096}, 6, 4096), std::nullopt);
}

TEST(IoQueue, RequestFactoriesCheckRegistrationBounds) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 8192, 6);
  File f(dir / "f", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  AlignedBuffer mem(8192);
  auto reg = dev.register_memory(mem.data(), 8192);
  EXPECT_THROW((void)IoRequest::read(f, reg, 4096, 4097, 0), std::system_error);
  EXPECT_THROW((void)IoRequest::write(f, reg, 8193, 0, 0), std::system_error);
  EXPECT_NO_THROW((void)IoRequest::read(f, reg, 4096, 4096, 0));
}

TEST(IoQueue, AsynchronousSubmitAndIncrementalWait) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 1 << 20, 8);
  File f(dir / "f", O_RDONLY);
  AlignedBuffer mem(1 << 20);
  IoQueue q(8);
  std::vector<IoRequest> reqs;
  for (std::uint64_t i = 0; i < 256; ++i) {
    reqs.push_back({IoOp::read, &f, mem.data() + i * 4096, 4096, i * 4096, i});
  }
  q.submit(reqs);
  EXPECT_EQ(q.outstanding(), 256U);
  std::size_t got = 0;
  while (q.outstanding() > 0) {
    const auto some = q.wait(10);
    EXPECT_GE(some.size(), std::min<std::size_t>(10, 256 - got));
    got += some.size();
  }
  EXPECT_EQ(got, 256U);
  EXPECT_EQ(find_mismatch(mem.span(), 8, 0), std::nullopt);
  EXPECT_TRUE(q.wait(1).empty());
}

// One request above io_uring's 32-bit length and our 1 GiB split point.
TEST(IoQueue, SplitsRequestsAboveOneGiB) {
  TempDir dir;
  const auto path = dir / "sparse";
  constexpr std::uint64_t kSize = (std::uint64_t{1} << 30) + 3 * 4096;
  test::write_sparse_file(path, kSize, 4096, 9);
  File f(path, O_RDONLY);
  AlignedBuffer mem(kSize);
  std::memset(mem.data() + kSize - 4096, 0xAA, 4096);
  IoQueue q(4);
  const std::vector<IoRequest> reqs = {{IoOp::read, &f, mem.data(), kSize, 0, 7}};
  const auto done = q.run(reqs);
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].error, 0);
  EXPECT_EQ(done[0].bytes, kSize);
  EXPECT_EQ(find_mismatch({mem.data() + kSize - 4096, 4096}, 9, kSize - 4096), std::nullopt);
}

TEST(IoQueue, DepthFromEnvironmentAndLimits) {
  EXPECT_EQ(IoQueue(7).depth(), 7U);
  EXPECT_THROW(IoQueue(40000), std::system_error);
}

TEST(IoQueue, DestructorWaitsForRequestsInFlight) {
  TempDir dir;
  test::write_pattern_file(dir / "f", 4 << 20, 8);
  File f(dir / "f", O_RDONLY);
  AlignedBuffer mem(4 << 20);
  {
    IoQueue q(16);
    std::vector<IoRequest> reqs;
    for (std::uint64_t i = 0; i < 64; ++i) {
      reqs.push_back({IoOp::read, &f, mem.data() + i * 65536, 65536, i * 65536, i});
    }
    q.submit(reqs);
  }  // must not return while the kernel still writes into mem
  // All 16 submitted ones completed before the queue was destroyed.
  EXPECT_EQ(find_mismatch({mem.data(), 16 * 65536}, 8, 0), std::nullopt);
}

}  // namespace
}  // namespace phx
