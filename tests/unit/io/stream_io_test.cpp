// SPDX-License-Identifier: MIT
// Stream-ordered I/O (lib/io/stream_io.*) on the fake CUDA driver: its
// bounds (worker threads, staging bytes), its ownership (threads joined and
// handles freed with the device), and that the ordering tests can tell a
// broken order from a right one (the test seam).  No test decides by time:
// the fake's slow stream operations only make the broken order show.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "core/device_state.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "fake_gpu.hpp"
#include "io/stream_io.hpp"
#include "io/stream_io_testing.hpp"
#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 23;
constexpr std::size_t kKiB = 1024;

// With the order ignored the I/O thread and the stream touch the same
// staging at once: a data race by design, which ThreadSanitizer reports
// (slowly, for every byte).  Under it the seam tests check only the
// ordered half.
#if defined(__SANITIZE_THREAD__)
constexpr bool kRacesReported = true;
#else
constexpr bool kRacesReported = false;
#endif

class StreamIoTest : public FakeGpuTest {
 protected:
  void TearDown() override {
    detail::testing::set_ignore_stream_order(false);
    FakeGpuTest::TearDown();
  }
};

class Fd {
 public:
  Fd(const std::filesystem::path &path, int flags) : fd_(::open(path.c_str(), flags, 0644)) {
    if (fd_ < 0) {
      throw std::system_error(errno, std::generic_category(), path.string());
    }
  }
  ~Fd() { (void)::close(fd_); }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&) = delete;
  Fd &operator=(Fd &&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

Options engine_options(Engine engine) {
  Options o = Options::defaults();
  o.engine = engine;
  return o;
}

detail::StreamRequest request(detail::Direction dir, int fd,
                              const std::shared_ptr<detail::DeviceState> &device,
                              const std::shared_ptr<detail::Mapping> &mapping, std::size_t offset,
                              std::size_t size, std::uint64_t file_offset, ssize_t *done) {
  detail::StreamRequest r;
  r.dir = dir;
  r.fd = fd;
  r.device = device;
  r.mapping = mapping;
  r.mapping_offset = offset;
  r.size = size;
  r.file_offset = file_offset;
  r.bytes_done = done;
  return r;
}

// Zeroed fake device memory registered with a compat device, and a file
// (written by the test) to read into it: the setup most tests here share.
struct CompatTarget {
  CompatTarget(const std::filesystem::path &file, std::size_t size)
      : mem(size),
        device(detail::DeviceState::open(0, engine_options(Engine::compat))),
        mapping(device->register_range(mem.data(), mem.size())),
        in(file, O_RDONLY) {
    mem.fill(std::byte{0});
  }
  FakeDeviceMemory mem;
  std::shared_ptr<detail::DeviceState> device;
  std::shared_ptr<detail::Mapping> mapping;
  Fd in;
};

// Waits for a condition that must come true without any help from the test
// (a detached worker leaving); a deadline only so that a bug fails the test
// instead of hanging it.
template <typename Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// 200 reads and writes over 8 streams with 4 workers and staging for 8
// small slots: ops queue for workers and submits wait for staging, and
// every byte still lands where it should.
TEST_F(StreamIoTest, ManyMoreOpsThanWorkersAllLand) {
  constexpr std::size_t kOps = 200;
  constexpr std::size_t kStreams = 8;
  constexpr std::size_t kRegion = 96 * kKiB;
  const detail::StreamLimits limits{.workers = 4,
                                    .staging_bytes = 256 * kKiB,
                                    .chunk = 32 * kKiB,
                                    .direct_chunk = 64 * kKiB,
                                    .depth = 2};
  write_pattern_file(dir_ / "in", kOps * kRegion, kSeed);
  FakeDeviceMemory mem(kOps * kRegion);
  mem.fill(std::byte{0});
  // The writes' source: the pattern at the regions they write.
  std::vector<std::byte> source(kOps * kRegion);
  fill_pattern(source, kSeed + 1, 0);
  for (std::size_t i = 1; i < kOps; i += 2) {
    mem.upload({source.begin() + static_cast<std::ptrdiff_t>(i * kRegion),
                source.begin() + static_cast<std::ptrdiff_t>((i + 1) * kRegion)},
               i * kRegion);
  }
  const auto device = detail::DeviceState::open(0, engine_options(Engine::compat));
  const auto mapping = device->register_range(mem.data(), mem.size());
  const Fd in(dir_ / "in", O_RDONLY);
  const Fd out(dir_ / "out", O_RDWR | O_CREAT);
  std::vector<std::unique_ptr<FakeStream>> streams;
  for (std::size_t s = 0; s < kStreams; ++s) {
    streams.push_back(std::make_unique<FakeStream>());
  }
  std::vector<ssize_t> done(kOps, -7);
  const auto size_of = [](std::size_t i) { return 40 * kKiB + i * 257; };  // 2 to 4 chunks
  phx_fake_cuda_set_op_delay_us(50);  // streams slower than the files: ops pile up
  detail::StreamIoStats stats;
  {
    detail::StreamIo io(device->id(), limits);
    for (std::size_t i = 0; i < kOps; ++i) {
      const bool write = i % 2 == 1;
      io.submit(request(write ? detail::Direction::write : detail::Direction::read,
                        write ? out.get() : in.get(), device, mapping, i * kRegion, size_of(i),
                        i * kRegion, &done[i]),
                streams[i % kStreams]->get());
      const auto now = io.stats();
      ASSERT_LE(now.threads_live, limits.workers);
      ASSERT_LE(now.staging_held, limits.staging_bytes);
    }
    for (const auto &s : streams) {
      s->synchronize();
    }
    stats = io.stats();
  }
  EXPECT_LE(stats.threads_created, limits.workers);
  EXPECT_LE(stats.staging_peak, limits.staging_bytes);
  EXPECT_GT(stats.staging_peak, 0U);
  EXPECT_EQ(stats.staging_leaked, 0U);
  const auto memory = mem.download();
  const auto file = read_whole_file(dir_ / "out");
  for (std::size_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(done[i], static_cast<ssize_t>(size_of(i))) << "op " << i;
    if (i % 2 == 0) {
      const auto found =
          find_mismatch({memory.data() + i * kRegion, size_of(i)}, kSeed, i * kRegion);
      ASSERT_FALSE(found.has_value()) << "read " << i << ": byte " << *found;
    } else {
      ASSERT_GE(file.size(), i * kRegion + size_of(i));
      const auto found =
          find_mismatch({file.data() + i * kRegion, size_of(i)}, kSeed + 1, i * kRegion);
      ASSERT_FALSE(found.has_value()) << "write " << i << ": byte " << *found;
    }
  }
}

// The generic path (host engine: the I/O thread blocks on the stream's
// event, then moves the bytes itself) with fewer workers than streams
// whose earlier work is slow.
TEST_F(StreamIoTest, BlockingOpsQueueBehindFewWorkers) {
  constexpr std::size_t kOps = 64;
  constexpr std::size_t kRegion = 16 * kKiB;
  const detail::StreamLimits limits{.workers = 2};
  write_pattern_file(dir_ / "in", kOps * kRegion, kSeed);
  std::vector<std::byte> host(kOps * kRegion);
  const auto device = detail::DeviceState::open(0, engine_options(Engine::host));
  const auto mapping = device->register_range(host.data(), host.size());
  const Fd in(dir_ / "in", O_RDONLY);
  std::vector<std::unique_ptr<FakeStream>> streams;
  for (std::size_t s = 0; s < 4; ++s) {
    streams.push_back(std::make_unique<FakeStream>());
  }
  phx_fake_cuda_set_op_delay_us(200);
  std::vector<ssize_t> done(kOps, -7);
  {
    detail::StreamIo io(device->id(), limits);
    for (std::size_t i = 0; i < kOps; ++i) {
      io.submit(request(detail::Direction::read, in.get(), device, mapping, i * kRegion, kRegion,
                        i * kRegion, &done[i]),
                streams[i % streams.size()]->get());
    }
    for (const auto &s : streams) {
      s->synchronize();
    }
    EXPECT_LE(io.stats().threads_created, limits.workers);
  }
  for (std::size_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(done[i], static_cast<ssize_t>(kRegion)) << "op " << i;
  }
  const auto found = find_mismatch(host, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
}

// One op larger than the whole budget cycles through slots that fit in it,
// and the slots are freed once the device's stream I/O has been idle.
TEST_F(StreamIoTest, OneOpLargerThanTheBudgetRuns) {
  constexpr std::size_t kSize = (std::size_t{5} << 20) + 333;
  const detail::StreamLimits limits{.staging_bytes = 64 * kKiB, .chunk = std::size_t{1} << 20};
  write_pattern_file(dir_ / "in", kSize, kSeed);
  CompatTarget t(dir_ / "in", kSize);
  const FakeStream stream;
  ssize_t done = -7;
  detail::StreamIo io(t.device->id(), limits);
  io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, kSize, 0, &done),
            stream.get());
  stream.synchronize();
  EXPECT_EQ(done, static_cast<ssize_t>(kSize));
  EXPECT_LE(io.stats().staging_peak, limits.staging_bytes);
  // Idle staging goes back to the system once nothing runs for a while.
  EXPECT_TRUE(eventually([&] { return io.stats().staging_held == 0; }));
  const auto memory = t.mem.download();
  const auto found = find_mismatch(memory, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
}

// An op smaller than a chunk holds a slot its size (in powers of two from
// 64 KiB), not a whole chunk: sixteen 4 KiB reads in flight fit in a budget
// of two chunks (a whole chunk each would allow two), and no submit waits
// for staging.
TEST_F(StreamIoTest, SmallOpsTakeSmallSlots) {
  constexpr std::size_t kOps = 16;
  constexpr std::size_t kSmall = 4 * kKiB;
  constexpr std::size_t kMinSlot = 64 * kKiB;
  const detail::StreamLimits limits{.staging_bytes = std::size_t{2} << 20,
                                    .chunk = std::size_t{1} << 20,
                                    .direct_chunk = std::size_t{1} << 20};
  write_pattern_file(dir_ / "in", kOps * kMinSlot, kSeed);
  FakeDeviceMemory mem(kOps * kMinSlot);
  mem.fill(std::byte{0});
  const auto device = detail::DeviceState::open(0, engine_options(Engine::compat));
  const auto mapping = device->register_range(mem.data(), mem.size());
  const Fd in(dir_ / "in", O_RDONLY);
  const FakeStream stream;
  std::vector<ssize_t> done(kOps + 1, -7);
  detail::StreamIo io(device->id(), limits);
  // One 100 KiB read: one 128 KiB slot.
  io.submit(
      request(detail::Direction::read, in.get(), device, mapping, 0, 100 * kKiB, 0, &done[kOps]),
      stream.get());
  stream.synchronize();
  EXPECT_EQ(done[kOps], static_cast<ssize_t>(100 * kKiB));
  EXPECT_EQ(io.stats().staging_peak, 2 * kMinSlot);
  phx_fake_cuda_set_op_delay_us(50);  // the stream lags: all sixteen are in flight at once
  for (std::size_t i = 0; i < kOps; ++i) {
    io.submit(request(detail::Direction::read, in.get(), device, mapping, i * kMinSlot + 512,
                      kSmall, i * kMinSlot + 512, &done[i]),
              stream.get());
  }
  stream.synchronize();
  const detail::StreamIoStats stats = io.stats();
  EXPECT_EQ(stats.staging_waits, 0U);
  EXPECT_LE(stats.staging_peak, limits.staging_bytes);
  EXPECT_EQ(stats.staging_leaked, 0U);
  const auto memory = mem.download();
  for (std::size_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(done[i], static_cast<ssize_t>(kSmall)) << "op " << i;
    const std::size_t at = i * kMinSlot + 512;
    const auto found = find_mismatch({memory.data() + at, kSmall}, kSeed, at);
    ASSERT_FALSE(found.has_value()) << "op " << i << ": byte " << *found;
  }
}

// A flag in device-mapped pinned memory that holds a stream back until the
// test opens it.
class StreamGate {
 public:
  StreamGate() {
    const detail::cuda::Driver &d = *detail::cuda::driver();
    const detail::cuda::ScopedContext scope(gpu_.context());
    void *block = nullptr;
    if (d.MemHostAlloc(&block, sizeof(std::uint32_t),
                       detail::cuda::kMemHostAllocPortable |
                           detail::cuda::kMemHostAllocDeviceMap) != detail::cuda::kSuccess) {
      throw std::runtime_error("cuMemHostAlloc");
    }
    flag_ = static_cast<std::uint32_t *>(block);
    *flag_ = 0;
    if (d.MemHostGetDevicePointer(&device_, flag_, 0) != detail::cuda::kSuccess) {
      throw std::runtime_error("cuMemHostGetDevicePointer");
    }
  }
  ~StreamGate() {
    const detail::cuda::ScopedContext scope(gpu_.context());
    (void)detail::cuda::driver()->MemFreeHost(flag_);
  }
  StreamGate(const StreamGate &) = delete;
  StreamGate &operator=(const StreamGate &) = delete;
  StreamGate(StreamGate &&) = delete;
  StreamGate &operator=(StreamGate &&) = delete;
  void hold(const FakeStream &stream) const {
    ASSERT_EQ(detail::cuda::driver()->StreamWaitValue32(stream.get(), device_, 1,
                                                        detail::cuda::kStreamWaitValueGeq),
              detail::cuda::kSuccess);
  }
  void open() const { std::atomic_ref<std::uint32_t>(*flag_).store(1, std::memory_order_seq_cst); }

 private:
  detail::cuda::Gpu gpu_{0};
  std::uint32_t *flag_ = nullptr;
  detail::cuda::CUdeviceptr device_ = 0;
};

// A read's I/O thread moves on once its file is read: with one worker, a
// read queued in a stream held back by earlier work does not hold up a read
// on another stream (it did while the worker waited for the copy).
TEST_F(StreamIoTest, AReadBehindAHeldStreamDoesNotHoldItsWorker) {
  constexpr std::size_t kSize = 4 * kKiB;
  constexpr std::size_t kApart = 64 * kKiB;
  const detail::StreamLimits limits{.workers = 1};
  write_pattern_file(dir_ / "in", 2 * kApart, kSeed);
  FakeDeviceMemory mem(2 * kApart);
  mem.fill(std::byte{0});
  const auto device = detail::DeviceState::open(0, engine_options(Engine::compat));
  const auto mapping = device->register_range(mem.data(), mem.size());
  const Fd in(dir_ / "in", O_RDONLY);
  const FakeStream held;
  const FakeStream other;
  const StreamGate gate;
  gate.hold(held);
  ssize_t done_held = -7;
  ssize_t done_other = -7;
  detail::StreamIo io(device->id(), limits);
  io.submit(request(detail::Direction::read, in.get(), device, mapping, 0, kSize, 0, &done_held),
            held.get());
  io.submit(request(detail::Direction::read, in.get(), device, mapping, kApart, kSize, kApart,
                    &done_other),
            other.get());
  // A deadline only so that the bug fails the test instead of hanging it.
  auto other_done = std::async(std::launch::async, [&] { other.synchronize(); });
  const bool finished = other_done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  const auto before = mem.download();
  gate.open();
  held.synchronize();
  other_done.wait();
  ASSERT_TRUE(finished) << "the read on the free stream waited for the held one";
  EXPECT_EQ(done_other, static_cast<ssize_t>(kSize));
  auto found = find_mismatch({before.data() + kApart, kSize}, kSeed, kApart);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
  // Still held then: nothing of the first read had reached device memory.
  EXPECT_TRUE(std::all_of(before.begin(), before.begin() + kSize,
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(done_held, static_cast<ssize_t>(kSize));
  const auto after = mem.download();
  found = find_mismatch({after.data(), kSize}, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
  EXPECT_TRUE(eventually([&] { return io.stats().staging_held > 0; }));
  EXPECT_EQ(io.stats().staging_leaked, 0U);
}

// How many looks @p count counted over some 300 ms, and over how many ms:
// at the back-off's floor that is one look per ms on any machine, and a
// test thread descheduled for longer only widens the window.
struct Looks {
  std::size_t looks = 0;
  double ms = 0;
};
template <class Count>
Looks looks_over_300ms(Count count) {
  const std::size_t before = count();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::size_t after = count();
  return {
      after - before,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()};
}

// A read whose stream is held: its worker moves on, and the idle worker
// that looks for its copy looks less and less often.  Without the back-off
// it woke every 20 us, thousands of times in the 300 ms here.
TEST_F(StreamIoTest, AHeldStreamIsLookedAtLessAndLessOften) {
  constexpr std::size_t kSize = 4 * kKiB;
  write_pattern_file(dir_ / "in", kSize, kSeed);
  CompatTarget t(dir_ / "in", kSize);
  const FakeStream held;
  const StreamGate gate;
  gate.hold(held);
  ssize_t done = -7;
  detail::StreamIo io(t.device->id(), detail::StreamLimits{.workers = 1});
  io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, kSize, 0, &done),
            held.get());
  ASSERT_TRUE(eventually([&] { return io.stats().reap_polls > 0; }));
  const Looks polls = looks_over_300ms([&] { return io.stats().reap_polls; });
  gate.open();
  held.synchronize();
  EXPECT_EQ(std::atomic_ref<ssize_t>(done).load(), static_cast<ssize_t>(kSize));
  const auto after = t.mem.download();
  const auto found = find_mismatch({after.data(), kSize}, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
  // About one look a ms at the floor; some ten without the back-off.
  EXPECT_GT(polls.looks, 0U) << "nobody looked for the held read's copy";
  EXPECT_LT(static_cast<double>(polls.looks), 3 * polls.ms)
      << "an idle worker looked " << polls.looks << " times in " << polls.ms << " ms";
  EXPECT_EQ(io.stats().staging_leaked, 0U);
}

// A submit that waits for staging held by a read behind a held stream
// looks for the slot less and less often too.
TEST_F(StreamIoTest, ASubmitWaitingForStagingLooksLessAndLessOften) {
  constexpr std::size_t kSize = 4 * kKiB;
  write_pattern_file(dir_ / "in", 2 * kSize, kSeed);
  CompatTarget t(dir_ / "in", 2 * kSize);
  const FakeStream held;
  const StreamGate gate;
  gate.hold(held);
  std::array<ssize_t, 2> done{-7, -7};
  // One 64 KiB slot: the second read waits until the first one's copy ran.
  detail::StreamIo io(t.device->id(),
                      detail::StreamLimits{.workers = 1, .staging_bytes = 64 * kKiB});
  io.submit(
      request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, kSize, 0, &done[0]),
      held.get());
  std::thread second([&] {
    io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, kSize, kSize, kSize,
                      &done[1]),
              held.get());
  });
  ASSERT_TRUE(eventually([&] { return io.stats().staging_wait_polls > 0; }));
  const Looks polls = looks_over_300ms([&] { return io.stats().staging_wait_polls; });
  gate.open();
  second.join();
  held.synchronize();
  for (std::size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(std::atomic_ref<ssize_t>(done[i]).load(), static_cast<ssize_t>(kSize))
        << "read " << i;
  }
  const auto after = t.mem.download();
  const auto found = find_mismatch({after.data(), 2 * kSize}, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
  EXPECT_EQ(io.stats().staging_waits, 1U);
  // About one look a ms at the floor; some ten without the back-off.
  EXPECT_LT(static_cast<double>(polls.looks), 3 * polls.ms)
      << "a waiting submit looked " << polls.looks << " times in " << polls.ms << " ms";
  EXPECT_EQ(io.stats().staging_leaked, 0U);
}

struct FailedRead {
  bool leaked = false;  // its staging left the pool
  ssize_t done = 0;     // its bytes_done
};

// A stream-ordered read of @p size bytes (one 4 KiB chunk unless @p limits
// and @p size say more) whose copy into the device fails, @p delay_us after
// the call is made (its I/O thread gets ahead of a late failure).
FailedRead read_whose_copy_fails(const TempDir &dir, unsigned delay_us,
                                 const detail::StreamLimits &limits = {},
                                 std::size_t size = 4 * kKiB) {
  write_pattern_file(dir / "in", size, kSeed);
  FakeDeviceMemory mem(size);
  const auto device = detail::DeviceState::open(0, engine_options(Engine::compat));
  const auto mapping = device->register_range(mem.data(), mem.size());
  const Fd in(dir / "in", O_RDONLY);
  const FakeStream stream;
  ssize_t done = -7;
  auto io = std::make_unique<detail::StreamIo>(device->id(), limits);
  phx_fake_cuda_fail_call_after("cuMemcpyHtoDAsync", 1, 999, delay_us);
  io->submit(request(detail::Direction::read, in.get(), device, mapping, 0, size, 0, &done),
             stream.get());
  stream.synchronize();
  FailedRead result;
  result.leaked = eventually([&] { return io->stats().staging_leaked > 0; });
  result.done = std::atomic_ref<ssize_t>(done).load();
  if (!result.leaked) {
    (void)io.release();  // its worker is stuck: do not hang the test joining it
  }
  return result;
}

// A read whose copy cannot be put in its stream: the stream is not left
// waiting, the staging the failed chain names stays out of the pool, and
// the device still closes (its I/O thread did not wait for a copy that
// will never come).
TEST_F(StreamIoTest, AReadWhoseCopyFailsLeavesNothingWaiting) {
  EXPECT_TRUE(read_whose_copy_fails(dir_, 0).leaked);
}

// A read whose chain fails after its worker has read the whole file: the
// call returned, so bytes_done is all the caller learns, and it must not
// say the bytes arrived.  The failing copy is slow, so the worker finishes
// first (where the result was once written as success).
TEST_F(StreamIoTest, AReadWhoseCopyFailsLateReportsEio) {
  const FailedRead read = read_whose_copy_fails(dir_, 100'000);
  EXPECT_TRUE(read.leaked);
  EXPECT_EQ(read.done, -static_cast<ssize_t>(EIO));
}

// The same with the read's 16 chunks read by four lanes: a lane waiting
// for a slot the failed chain will never copy out gives up too, and the
// late failure still reaches bytes_done.
TEST_F(StreamIoTest, AReadInLanesWhoseCopyFailsLeavesNothingWaiting) {
  const detail::StreamLimits limits{.chunk = 16 * kKiB, .depth = 4, .lanes = 4};
  const std::size_t helpers = detail::testing::stream_lane_helpers();
  EXPECT_TRUE(read_whose_copy_fails(dir_, 0, limits, 256 * kKiB).leaked);
  const FailedRead late = read_whose_copy_fails(dir_, 100'000, limits, 256 * kKiB);
  EXPECT_TRUE(late.leaked);
  EXPECT_EQ(late.done, -static_cast<ssize_t>(EIO));
  EXPECT_GT(detail::testing::stream_lane_helpers(), helpers) << "no lane read a chunk";
}

// Reads of many chunks, read by four or three lanes each, from three
// streams slower than the files (the lanes wait for their slots to be
// copied out): every chunk lands where it belongs and bytes_done is whole.
// Lanes of one are the I/O thread alone.
TEST_F(StreamIoTest, LanesReadEveryChunkWhereItBelongs) {
  constexpr std::size_t kOps = 24;
  constexpr std::size_t kStreams = 3;
  constexpr std::size_t kRegion = 640 * kKiB;
  const auto size_of = [](std::size_t i) { return 100 * kKiB + i * 20011; };  // 4 to 19 chunks
  const auto offset_of = [](std::size_t i) { return i * kRegion + (i * 4099) % 8192; };
  write_pattern_file(dir_ / "in", kOps * kRegion + 8192, kSeed);
  // 3 lanes over 4 slots: a lane owns slots, not every third chunk.
  for (const std::size_t lanes : {std::size_t{4}, std::size_t{3}, std::size_t{1}}) {
    SCOPED_TRACE("lanes " + std::to_string(lanes));
    CompatTarget t(dir_ / "in", kOps * kRegion + 8192);
    std::vector<std::unique_ptr<FakeStream>> streams;
    for (std::size_t s = 0; s < kStreams; ++s) {
      streams.push_back(std::make_unique<FakeStream>());
    }
    std::vector<ssize_t> done(kOps, -7);
    const std::size_t helpers = detail::testing::stream_lane_helpers();
    phx_fake_cuda_set_op_delay_us(30);
    {
      detail::StreamIo io(t.device->id(), detail::StreamLimits{.workers = 4,
                                                               .staging_bytes = 4 << 20,
                                                               .chunk = 32 * kKiB,
                                                               .depth = 4,
                                                               .lanes = lanes});
      for (std::size_t i = 0; i < kOps; ++i) {
        io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, offset_of(i),
                          size_of(i), offset_of(i), &done[i]),
                  streams[i % kStreams]->get());
      }
      for (const auto &s : streams) {
        s->synchronize();
      }
      EXPECT_EQ(io.stats().staging_leaked, 0U);
    }
    phx_fake_cuda_set_op_delay_us(0);
    if (lanes > 1) {
      EXPECT_GT(detail::testing::stream_lane_helpers(), helpers) << "no lane read a chunk";
    } else {
      EXPECT_EQ(detail::testing::stream_lane_helpers(), helpers);
    }
    const auto memory = t.mem.download();
    for (std::size_t i = 0; i < kOps; ++i) {
      ASSERT_EQ(done[i], static_cast<ssize_t>(size_of(i))) << "op " << i;
      const auto found =
          find_mismatch({memory.data() + offset_of(i), size_of(i)}, kSeed, offset_of(i));
      ASSERT_FALSE(found.has_value()) << "op " << i << ": byte " << *found;
    }
  }
}

// A read in lanes behind a write that fails, sized when submitted by where
// the write would end: the file ends in its third chunk, so the lanes reading
// later chunks find nothing, and bytes_done says the file's length, as one
// thread reading in order says it; past the end the memory gets zeros.
TEST_F(StreamIoTest, LanesStopWhereTheFileEndsAsOneThreadDoes) {
  constexpr std::size_t kChunk = 64 * kKiB;
  constexpr std::size_t kHead = 2 * kChunk + 4096 + 5;
  constexpr std::size_t kSize = 16 * kChunk + 17;
  write_pattern_file(dir_ / "in", kHead, kSeed);
  FakeDeviceMemory source(kSize);
  CompatTarget t(dir_ / "in", kSize);
  t.mem.fill(std::byte{0xee});
  const auto from = t.device->register_range(source.data(), source.size());
  const FakeStream stream;
  ssize_t written = -7;
  ssize_t read = -7;
  const std::size_t helpers = detail::testing::stream_lane_helpers();
  {
    detail::StreamIo io(t.device->id(),
                        detail::StreamLimits{.chunk = kChunk, .depth = 8, .lanes = 4});
    ASSERT_EQ(
        phx_fake_cuda_enqueue_fill(stream.get(), source.device_pointer(), kSize, 0x3c, 100000), 0);
    // A read-only descriptor: the write fails, the file keeps kHead bytes.
    io.submit(request(detail::Direction::write, t.in.get(), t.device, from, 0, kSize, 0, &written),
              stream.get());
    io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, kSize, 0, &read),
              stream.get());
    stream.synchronize();
  }
  EXPECT_GT(detail::testing::stream_lane_helpers(), helpers) << "no lane read a chunk";
  EXPECT_LT(written, 0);
  EXPECT_EQ(read, static_cast<ssize_t>(kHead));
  const auto seen = t.mem.download();
  EXPECT_FALSE(find_mismatch(std::span(seen).first(kHead), kSeed, 0).has_value());
  EXPECT_EQ(std::count(seen.begin() + kHead, seen.end(), std::byte{0}),
            static_cast<std::ptrdiff_t>(kSize - kHead))
      << "past the file's end the lanes copied something else than zeros";
}

// The device owns its stream-ordered I/O: once the device is gone, so are
// its threads, events, flags and staging; whether the last reference goes
// with the caller (after a synchronize) or with the op itself (the caller
// let go of everything while the op was still waiting in its stream).
TEST_F(StreamIoTest, ThreadsAndHandlesGoWithTheDevice) {
  constexpr std::size_t kSize = (std::size_t{3} << 20) + 5;
  write_pattern_file(dir_ / "in", kSize, kSeed);
  FakeDeviceMemory mem(kSize);
  const FakeStream stream;
  File f(dir_ / "in", O_RDONLY);
  const auto round = [&](Engine engine, bool let_go_first) {
    mem.fill(std::byte{0});
    ssize_t done = -7;
    {
      auto dev = Device::open(0, engine);
      auto reg = dev.register_memory(mem.data(), mem.size());
      // Slow work first: the op is still queued when the caller lets go.
      ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), mem.device_pointer(), kSize, 0x11, 100000),
                0);
      f.read_async(reg, 0, kSize, 0, &done, stream.get());
      if (!let_go_first) {
        stream.synchronize();
      }
    }
    stream.synchronize();
    ASSERT_EQ(done, static_cast<ssize_t>(kSize));
    const auto found = find_mismatch(mem.download(), kSeed, 0);
    ASSERT_FALSE(found.has_value()) << "byte " << *found;
    // Joined by whoever dropped the device's last reference: this thread,
    // or the op's worker (a synchronized stream does not mean the worker
    // has let go of its op yet), which then leaves its loop at once.
    EXPECT_TRUE(eventually([] { return detail::testing::live_stream_workers() == 0; }));
  };
  round(Engine::compat, false);  // per-process state (driver, contexts) settles
  // Pinned memory freed on a thread without a current context goes through
  // the one context the library keeps for the process (cuda::any_context);
  // which round first frees staging that way depends on timing, so take it
  // before counting.
  std::thread([] { (void)detail::cuda::any_context(); }).join();
  const auto before = fake_counts();
  for (const bool let_go_first : {false, true}) {
    round(Engine::compat, let_go_first);
    // A worker that dropped the last reference frees the handles on its way
    // out, after it stopped counting as live.
    (void)eventually([&] {
      const auto now = fake_counts();
      return now.events == before.events && now.host_allocs == before.host_allocs &&
             now.streams == before.streams && now.contexts == before.contexts;
    });
    const auto after = fake_counts();
    EXPECT_EQ(after.events, before.events) << "let go first: " << let_go_first;
    EXPECT_EQ(after.host_allocs, before.host_allocs) << "let go first: " << let_go_first;
    EXPECT_EQ(after.contexts, before.contexts) << "let go first: " << let_go_first;
    EXPECT_EQ(after.streams, before.streams) << "let go first: " << let_go_first;
  }
}

// The seam the GPU suite's negative control uses, here on the fake: with
// the stream's order ignored a write takes the bytes from before the slow
// fill; with it kept, the fill's.
TEST_F(StreamIoTest, WriteOrderBreaksOnlyWithTheSeam) {
  constexpr std::size_t kSize = (std::size_t{6} << 20) + 123;
  FakeDeviceMemory mem(kSize);
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem.data(), mem.size());
  const FakeStream stream;
  // Broken first, and another value each time: staging reused from the
  // ordered round would hold the right bytes already.
  for (const bool ignore : {true, false}) {
    if (ignore && kRacesReported) {
      continue;
    }
    detail::testing::set_ignore_stream_order(ignore);
    const auto value = static_cast<std::uint8_t>(ignore ? 0xa5 : 0x5a);
    mem.fill(std::byte{0});
    File f(dir_ / (ignore ? "broken" : "ordered"), O_RDWR | O_CREAT);
    ssize_t done = -7;
    ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), mem.device_pointer(), kSize, value, 300000),
              0);
    f.write_async(reg, 0, kSize, 0, &done, stream.get());
    stream.synchronize();
    ASSERT_EQ(done, static_cast<ssize_t>(kSize));
    const auto file = read_whole_file(dir_ / (ignore ? "broken" : "ordered"));
    ASSERT_EQ(file.size(), kSize);
    std::size_t wrong = 0;
    for (const std::byte b : file) {
      wrong += b != std::byte{value} ? 1 : 0;
    }
    if (ignore) {
      EXPECT_GT(wrong, 0U) << "the write waited for the fill with the order ignored";
    } else {
      EXPECT_EQ(wrong, 0U) << "bytes of the file that are not what the stream wrote before";
    }
  }
}

// Reads: one worker, held by an op on a slow stream; a read on a second
// stream then copies its staging into device memory before the worker got
// to it when the order is ignored, and waits for it when it is kept.
TEST_F(StreamIoTest, ReadOrderBreaksOnlyWithTheSeam) {
  constexpr std::size_t kChunk = 64 * kKiB;
  constexpr std::size_t kSize = 3 * kChunk;
  const detail::StreamLimits limits{.workers = 1, .chunk = kChunk, .depth = 1};
  write_pattern_file(dir_ / "in", kSize, kSeed);
  FakeDeviceMemory blocker(kSize);
  FakeDeviceMemory target(kSize);
  const auto device = detail::DeviceState::open(0, engine_options(Engine::compat));
  const auto blocker_map = device->register_range(blocker.data(), blocker.size());
  const auto target_map = device->register_range(target.data(), target.size());
  const Fd in(dir_ / "in", O_RDONLY);
  const FakeStream slow;
  const FakeStream other;
  // Broken first: freed staging of an ordered round may be handed out again
  // with the file's bytes still in it.
  for (const bool ignore : {true, false}) {
    if (ignore && kRacesReported) {
      continue;
    }
    detail::testing::set_ignore_stream_order(ignore);
    target.fill(std::byte{0});
    ssize_t done_blocker = -7;
    ssize_t done = -7;
    std::vector<std::byte> seen(kSize);
    {
      detail::StreamIo io(device->id(), limits);
      // The worker reads the blocker's first chunk, then waits for the slow
      // stream to copy it out before it reuses the one slot.
      ASSERT_EQ(phx_fake_cuda_enqueue_fill(slow.get(), blocker.device_pointer(), kSize, 1, 300000),
                0);
      io.submit(request(detail::Direction::read, in.get(), device, blocker_map, 0, kSize, 0,
                        &done_blocker),
                slow.get());
      io.submit(request(detail::Direction::read, in.get(), device, target_map, 0, kSize, 0, &done),
                other.get());
      ASSERT_EQ(cuMemcpyDtoHAsync_v2(seen.data(), target.device_pointer(), kSize, other.get()), 0);
      other.synchronize();
      slow.synchronize();
      other.synchronize();
    }
    EXPECT_EQ(done, static_cast<ssize_t>(kSize));
    const auto found = find_mismatch(seen, kSeed, 0);
    if (ignore) {
      EXPECT_TRUE(found.has_value()) << "the stream saw the file with the order ignored";
    } else {
      EXPECT_FALSE(found.has_value())
          << "the copy after the read saw byte " << *found << " before the file's";
    }
  }
}

// A read right behind a write that grows the file, on one stream held by
// a slow fill: the read is sized when it is submitted, before the write
// reached the file, and must still read all the write put there.  Then
// the same with a write that fails: the read stops at the file's end and
// copies zeros past it, not an earlier op's staging.
TEST_F(StreamIoTest, AReadBehindAWriteThatGrowsTheFileReadsItAll) {
  constexpr std::size_t kSize = (std::size_t{1} << 20) + 4096 + 17;
  constexpr std::size_t kHead = 4096;
  FakeDeviceMemory source(kSize);
  FakeDeviceMemory target(kSize);
  auto dev = Device::open(0, Engine::compat);
  auto from = dev.register_memory(source.data(), source.size());
  auto into = dev.register_memory(target.data(), target.size());
  const FakeStream stream;
  struct Outcome {
    ssize_t written = -7;
    ssize_t read = -7;
    std::vector<std::byte> seen;
  };
  // A file of kHead bytes, opened with @p flags; a slow fill, a write of
  // kSize bytes and a read of them, all on one stream.
  const auto write_then_read = [&](const char *name, int flags) {
    write_pattern_file(dir_ / name, kHead, kSeed);
    File f(dir_ / name, flags);
    target.fill(std::byte{0xee});
    Outcome out;
    EXPECT_EQ(
        phx_fake_cuda_enqueue_fill(stream.get(), source.device_pointer(), kSize, 0x3c, 300000), 0);
    f.write_async(from, 0, kSize, 0, &out.written, stream.get());
    f.read_async(into, 0, kSize, 0, &out.read, stream.get());
    stream.synchronize();
    out.seen.resize(kSize);
    EXPECT_EQ(cuMemcpyDtoH_v2(out.seen.data(), target.device_pointer(), kSize), 0);
    return out;
  };
  const Outcome grown = write_then_read("grows", O_RDWR);
  EXPECT_EQ(grown.written, static_cast<ssize_t>(kSize));
  EXPECT_EQ(grown.read, static_cast<ssize_t>(kSize))
      << "the read stopped where the file ended when it was submitted";
  EXPECT_EQ(std::count(grown.seen.begin(), grown.seen.end(), std::byte{0x3c}),
            static_cast<std::ptrdiff_t>(kSize));
  // A write that cannot reach the file (a read-only descriptor): the read
  // behind it gets the file's first kHead bytes, and zeros after them.
  const Outcome failed = write_then_read("stays", O_RDONLY);
  EXPECT_LT(failed.written, 0);
  EXPECT_EQ(failed.read, static_cast<ssize_t>(kHead));
  EXPECT_FALSE(find_mismatch(std::span(failed.seen).first(kHead), kSeed, 0).has_value());
  EXPECT_EQ(std::count(failed.seen.begin() + kHead, failed.seen.end(), std::byte{0}),
            static_cast<std::ptrdiff_t>(kSize - kHead))
      << "past the file's end the read copied something else than zeros";
}

// Idle staging goes back through cuMemFreeHost, which waits for the work in
// every stream (the fake does as CUDA does).  A read submitted while an
// idle worker was freeing used to be queued for that same worker, the only
// one, while its stream waited for the flag only that worker sets: on a GPU
// neither ever returned (LMCache's retrievals after a pause of two seconds).
// The fake gives the free's wait up after 20 s and counts it.
TEST_F(StreamIoTest, GivingIdleStagingBackDoesNotStallANewRead) {
  constexpr std::size_t kSize = 256 * kKiB;
  const detail::StreamLimits limits{.workers = 1, .idle_trim = std::chrono::milliseconds(50)};
  write_pattern_file(dir_ / "in", 2 * kSize, kSeed);
  CompatTarget t(dir_ / "in", 2 * kSize);
  const FakeStream stream;
  detail::StreamIo io(t.device->id(), limits);
  ssize_t first = -7;
  io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, kSize, 0, &first),
            stream.get());
  stream.synchronize();
  ASSERT_EQ(first, static_cast<ssize_t>(kSize));
  ASSERT_TRUE(eventually([&] { return io.stats().staging_held > 0; }));
  // The idle worker's free first sleeps 300 ms: the next read is submitted
  // while the free is under way.
  const long gave_up_before = fake_counts().sync_gave_up;
  phx_fake_cuda_fail_call_after("cuMemFreeHost", 1, 0, 300000);
  ASSERT_TRUE(eventually([&] { return io.stats().staging_held == 0; }));
  ssize_t second = -7;
  io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, kSize, kSize, kSize,
                    &second),
            stream.get());
  stream.synchronize();
  EXPECT_EQ(fake_counts().sync_gave_up, gave_up_before)
      << "the free waited for a stream that waited for the freeing worker";
  EXPECT_EQ(second, static_cast<ssize_t>(kSize));
  const auto seen = t.mem.download();
  const auto found = find_mismatch(seen, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
}

// A small read that finds the budget full of idle larger slots uses one of
// them: freeing one (cuMemFreeHost) would wait for every stream of the
// device.  Before, it freed a 1 MiB slot to make a 64 KiB one.
TEST_F(StreamIoTest, ASmallReadUsesAnIdleLargerSlotRatherThanFreeOne) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const detail::StreamLimits limits{
      .staging_bytes = 2 * kMiB, .chunk = kMiB, .direct_chunk = kMiB, .depth = 2};
  write_pattern_file(dir_ / "in", 2 * kMiB, kSeed);
  CompatTarget t(dir_ / "in", 2 * kMiB);
  const FakeStream stream;
  detail::StreamIo io(t.device->id(), limits);
  ssize_t big = -7;
  io.submit(request(detail::Direction::read, t.in.get(), t.device, t.mapping, 0, 2 * kMiB, 0, &big),
            stream.get());
  stream.synchronize();
  ASSERT_EQ(big, static_cast<ssize_t>(2 * kMiB));
  ASSERT_TRUE(eventually([&] { return io.stats().staging_held == 2 * kMiB; }));
  t.mem.fill(std::byte{0});
  ssize_t small = -7;
  io.submit(
      request(detail::Direction::read, t.in.get(), t.device, t.mapping, 4097, 1000, 4097, &small),
      stream.get());
  stream.synchronize();
  EXPECT_EQ(small, 1000);
  EXPECT_EQ(io.stats().staging_held, 2 * kMiB) << "a 1 MiB slot was freed for a small one";
  const auto seen = t.mem.download();
  const auto found = find_mismatch({seen.data() + 4097, 1000}, kSeed, 4097);
  EXPECT_FALSE(found.has_value()) << "byte " << *found;
}

}  // namespace
}  // namespace phx::test
