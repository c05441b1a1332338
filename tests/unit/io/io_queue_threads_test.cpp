// SPDX-License-Identifier: MIT
// IoQueues created and destroyed on threads that never synchronise with
// each other, as the safetensors loader's file threads do.  liburing maps a
// ring's memory behind ThreadSanitizer's back, so a ring that gets the
// addresses of another thread's destroyed ring looked to TSan like a data
// race on the submission entries (lib/core/tsan_kernel_memory.hpp).  Under the
// tsan preset this test fails (TSan's exit code) without the annotation; in
// every build it checks the bytes each queue read.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using test::AlignedBuffer;
using test::find_mismatch;
using test::TempDir;

TEST(IoQueueThreads, RingsOfUnsynchronisedThreadsReuseEachOthersMemory) {
  constexpr std::size_t kBlock = 65536;
  constexpr int kThreads = 4;
  constexpr int kRingsPerThread = 16;
  TempDir dir;
  test::write_pattern_file(dir / "f", kThreads * kBlock, 31);
  File f(dir / "f", O_RDONLY);
  auto dev = Device::open(0, Engine::host);
  // Each thread its own slice; the failures are only counted (relaxed: the
  // join orders them), so the threads share no synchronisation TSan sees
  // between one thread's ring teardown and another's ring setup.
  AlignedBuffer mem(kThreads * kBlock);
  auto reg = dev.register_memory(mem.data(), mem.size());
  std::atomic<int> bad_reads{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto slot = static_cast<std::size_t>(t) * kBlock;
      for (int i = 0; i < kRingsPerThread; ++i) {
        IoQueue q(8);  // a fresh ring each time: mapped, used, unmapped
        const auto done = q.run(std::vector{IoRequest::read(f, reg, slot, kBlock, slot)});
        if (done.size() != 1 || done[0].error != 0 || done[0].bytes != kBlock) {
          bad_reads.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(find_mismatch(mem.span(), 31, 0), std::nullopt);
}

}  // namespace
}  // namespace phx
