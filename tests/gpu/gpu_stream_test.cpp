// SPDX-License-Identifier: MIT
// Stream-ordered I/O: the stream's order must hold both ways, and I/Os on
// different streams must run at the same time.  With
// PHX_TEST_IGNORE_STREAM_ORDER=1 in the environment these tests set the
// library's test seam (io/stream_io_testing.hpp) that skips the ordering
// waits, and the ordering tests must then fail: that shows they test
// something (scripts/gpu-check --broken-order).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "gpu_support.hpp"
#include "io/stream_io_testing.hpp"
#include "kernels.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 77;

class StreamOrder : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    // The negative control: read by the test only, never by the library.
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread of the test starts
    if (const char *v = std::getenv("PHX_TEST_IGNORE_STREAM_ORDER");
        v != nullptr && std::string_view(v) == "1") {
      detail::testing::set_ignore_stream_order(true);
    }
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    detail::testing::set_ignore_stream_order(false);
    if (stream_ != nullptr) {
      (void)cudaStreamDestroy(stream_);
    }
  }
  cudaStream_t stream_ = nullptr;
};

// A kernel fills the buffer slowly; write_async on the same stream must
// write what the kernel wrote, not what was there before.
TEST_F(StreamOrder, WriteAsyncWritesTheKernelsOutput) {
  constexpr std::size_t kSize = (std::size_t{24} << 20) + 123;
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(kSize);
  mem.fill(0);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "out", O_RDWR | O_CREAT);
  ssize_t done = -7;
  launch_slow_fill(mem.data(), kSize, 0x5a, 200.0, stream_);
  f.write_async(reg, 0, kSize, 4096, &done, stream_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  ASSERT_EQ(done, static_cast<ssize_t>(kSize));
  const auto file = read_whole_file(dir_ / "out");
  ASSERT_EQ(file.size(), kSize + 4096);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kSize; ++i) {
    wrong += static_cast<std::uint8_t>(file[4096 + i]) != slow_fill_byte(0x5a, i) ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0U) << "bytes of the file that are not the kernel's output";
}

// read_async then a checksum kernel: the kernel must see the file's bytes,
// and the read must land after the slow kernel enqueued before it.
TEST_F(StreamOrder, KernelAfterReadAsyncSeesTheFile) {
  constexpr std::size_t kSize = (std::size_t{24} << 20) + 77;
  write_pattern_file(dir_ / "in", kSize + 1000, kSeed);
  const auto file = read_whole_file(dir_ / "in");
  const unsigned long long want = host_checksum(file.data() + 1000, kSize);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(kSize);
  DeviceMemory sum(sizeof(unsigned long long));
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "in", O_RDONLY);
  ssize_t done = -7;
  launch_slow_fill(mem.data(), kSize, 0x11, 200.0, stream_);
  f.read_async(reg, 0, kSize, 1000, &done, stream_);
  launch_checksum(mem.data(), kSize, reinterpret_cast<unsigned long long *>(sum.data()), stream_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_EQ(done, static_cast<ssize_t>(kSize));
  unsigned long long got = 0;
  CUDA_OK(cudaMemcpy(&got, sum.data(), sizeof(got), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want) << "the checksum kernel did not see the file's bytes";
  EXPECT_EQ(mem.to_host(0, kSize), std::vector<std::byte>(file.begin() + 1000, file.end()));
}

// A long chain (2 GiB in 4 MiB chunks: about 1500 stream operations) must
// not stall on a full stream queue.
TEST_F(StreamOrder, LargeReadAsync) {
  const std::size_t size = (std::size_t{2} << 30) + 5;
  write_pattern_file(dir_ / "big", size, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(size);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "big", O_RDONLY, 0644, DirectIo::off);
  ssize_t done = -7;
  f.read_async(reg, 0, size, 0, &done, stream_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  ASSERT_EQ(done, static_cast<ssize_t>(size));
  constexpr std::size_t kStep = std::size_t{256} << 20;
  for (std::size_t at = 0; at < size; at += kStep) {
    const std::size_t n = std::min(kStep, size - at);
    ASSERT_EQ(find_mismatch(mem.to_host(at, n), kSeed, at), std::nullopt) << "at " << at;
  }
}

// The paper's C signature, the legacy default stream, and end of file.
TEST_F(StreamOrder, CApiOnTheDefaultStream) {
  constexpr std::size_t kSize = std::size_t{8} << 20;
  write_pattern_file(dir_ / "in", kSize - 10, kSeed);
  ASSERT_EQ(phxfs_open_engine(0, PHXFS_ENGINE_COMPAT), 0) << phxfs_last_error();
  DeviceMemory mem(kSize);
  DeviceMemory sum(sizeof(unsigned long long));
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), kSize, &target), 0) << phxfs_last_error();
  const int fd = ::open((dir_ / "in").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ssize_t done = -7;
  launch_slow_fill(mem.data(), kSize, 0x22, 100.0, nullptr);
  ASSERT_EQ(phxfs_read_async({fd, 0}, mem.data(), kSize, 0, &done, nullptr), 0)
      << phxfs_last_error();
  launch_checksum(mem.data(), kSize - 10, reinterpret_cast<unsigned long long *>(sum.data()),
                  nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(done, static_cast<ssize_t>(kSize - 10));  // short: end of file
  unsigned long long got = 0;
  CUDA_OK(cudaMemcpy(&got, sum.data(), sizeof(got), cudaMemcpyDeviceToHost));
  const auto file = read_whole_file(dir_ / "in");
  EXPECT_EQ(got, host_checksum(file.data(), file.size()));
  // An unregistered target fails at once, without touching the stream.
  int x = 0;
  EXPECT_EQ(phxfs_read_async({fd, 0}, &x, 4, 0, &done, nullptr), -1);
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
  EXPECT_EQ(phxfs_close(0), 0);
}

// Four reads on four streams overlap; the same four on one stream run one
// after another.  Host engine with pinned memory: one pread per I/O, so
// overlap shows directly in the time.
TEST_F(StreamOrder, IosOnDifferentStreamsOverlap) {
  constexpr std::size_t kStreams = 4;
  constexpr std::size_t kSize = std::size_t{96} << 20;
  write_pattern_file(dir_ / "in", kSize * kStreams, kSeed);
  (void)read_whole_file(dir_ / "in");  // warm the page cache
  auto dev = Device::open(0, Engine::host);
  void *pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, kSize * kStreams));
  auto reg = dev.register_memory(pinned, kSize * kStreams);
  File f(dir_ / "in", O_RDONLY, 0644, DirectIo::off);
  std::vector<cudaStream_t> streams(kStreams);
  for (auto &s : streams) {
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  std::vector<ssize_t> done(kStreams, -7);
  const auto timed = [&](bool spread) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kStreams; ++i) {
      f.read_async(reg, i * kSize, kSize, i * kSize, &done[i], spread ? streams[i] : stream_);
    }
    for (auto &s : streams) {
      (void)cudaStreamSynchronize(s);
    }
    (void)cudaStreamSynchronize(stream_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double serial = 1e9;
  double parallel = 1e9;
  for (int round = 0; round < 3; ++round) {
    serial = std::min(serial, timed(false));
    parallel = std::min(parallel, timed(true));
  }
  for (std::size_t i = 0; i < kStreams; ++i) {
    EXPECT_EQ(done[i], static_cast<ssize_t>(kSize));
  }
  EXPECT_EQ(find_mismatch({static_cast<std::byte *>(pinned), kSize * kStreams}, kSeed, 0),
            std::nullopt);
  RecordProperty("serial_s", std::to_string(serial));
  RecordProperty("parallel_s", std::to_string(parallel));
  std::printf("4 x 96 MiB stream-ordered reads: one stream %.1f ms, four streams %.1f ms\n",
              serial * 1e3, parallel * 1e3);
  EXPECT_LT(parallel, serial * 0.7) << "I/Os on different streams did not overlap";
  for (auto &s : streams) {
    (void)cudaStreamDestroy(s);
  }
  reg.release();
  CUDA_OK(cudaFreeHost(pinned));
}

}  // namespace
}  // namespace phx::test
