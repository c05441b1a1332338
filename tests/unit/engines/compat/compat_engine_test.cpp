// SPDX-License-Identifier: MIT
// The compat engine (pinned staging + copies to the GPU) on the fake CUDA
// driver (tests/fakecuda): every size and alignment byte for byte, both
// directions, end of file, concurrency, refusals, injected CUDA failures,
// stream order and handle leaks.  The same engine on a real GPU is
// tests/gpu; here it runs in CI and under the sanitizers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "engines/compat/copy_pool.hpp"
#include "fake_gpu.hpp"
#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 41;

using CompatEngine = FakeGpuTest;

// Zeroed fake device memory registered on compat device 0.
struct Zeroed {
  explicit Zeroed(std::size_t size)
      : memory(std::make_unique<FakeDeviceMemory>(size)), dev(Device::open(0, Engine::compat)) {
    memory->fill(std::byte{0});
    reg = dev.register_memory(memory->data(), memory->size());
  }
  std::unique_ptr<FakeDeviceMemory> memory;
  Device dev;
  Registration reg;
};

std::vector<std::byte> pattern(std::size_t size, std::uint64_t offset) {
  std::vector<std::byte> out(size);
  fill_pattern(out, kSeed, offset);
  return out;
}

// What a read of [file_offset, +size) into reg_offset must leave in memory
// that held @fill: the file's bytes there, @fill everywhere else.
void expect_read_landed(const std::vector<std::byte> &memory, std::size_t reg_offset,
                        std::size_t size, std::uint64_t file_offset, std::byte fill) {
  const auto found = find_mismatch({memory.data() + reg_offset, size}, kSeed, file_offset);
  ASSERT_FALSE(found.has_value()) << "byte " << *found << " of the read differs from the file";
  for (std::size_t i = 0; i < memory.size(); ++i) {
    if (i < reg_offset || i >= reg_offset + size) {
      ASSERT_EQ(memory[i], fill) << "byte " << i << " outside the read changed";
    }
  }
}

struct Shape {
  std::size_t size;
  std::uint64_t file_offset;
  std::size_t reg_offset;
};

// Readable parameters in ctest's listing.
void PrintTo(const Shape &s, std::ostream *os) {
  *os << s.size << " bytes at " << s.file_offset << " into " << s.reg_offset;
}

std::string shape_name(const ::testing::TestParamInfo<std::tuple<DirectIo, Shape>> &info) {
  const DirectIo direct = std::get<0>(info.param);
  const Shape shape = std::get<1>(info.param);
  return std::string(direct == DirectIo::off ? "Buffered" : "Direct") + "_" +
         std::to_string(shape.size) + "_at_" + std::to_string(shape.file_offset) + "_into_" +
         std::to_string(shape.reg_offset);
}

class CompatShapes : public CompatEngine,
                     public ::testing::WithParamInterface<std::tuple<DirectIo, Shape>> {};

// Inline lanes (under 512 KiB), transfers spread over the workers and the
// caller in pieces (1 MiB, 1 MiB + 1, 5 MiB: see chunk_for), whole chunks,
// unaligned everything.
INSTANTIATE_TEST_SUITE_P(
    FakeGpu, CompatShapes,
    ::testing::Combine(::testing::Values(DirectIo::preferred, DirectIo::off),
                       ::testing::Values(Shape{1, 0, 0}, Shape{4096, 4096, 0}, Shape{4095, 777, 3},
                                         Shape{std::size_t{1} << 20, 0, 0},
                                         Shape{(std::size_t{1} << 20) + 1, 4096, 4096},
                                         Shape{(std::size_t{5} << 20) + 123, 1000, 12345},
                                         Shape{(std::size_t{37} << 20) + 7, 8192, 0})),
    shape_name);

TEST(CopyPoolChunks, MidSizeTransfersAreSpreadOverTheWorkers) {
  using phx::detail::chunk_for;
  using phx::detail::kMinSpreadChunk;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  // Large transfers keep the configured chunk.
  EXPECT_EQ(chunk_for(1024 * kMiB, 1, 4 * kMiB, 12), 4 * kMiB);
  EXPECT_EQ(chunk_for(1024 * kMiB, 4096, 16 * kMiB, 12), 16 * kMiB);
  // One configured chunk's worth is cut into pieces for several workers,
  // never below kMinSpreadChunk.
  EXPECT_EQ(chunk_for(4 * kMiB, 1, 4 * kMiB, 12), 86U * 4096);  // a twelfth, whole pages
  EXPECT_EQ(chunk_for(kMiB, 1, 4 * kMiB, 12), kMinSpreadChunk);
  EXPECT_EQ(chunk_for(16 * kMiB, 512, 16 * kMiB, 8), 2 * kMiB);
  EXPECT_EQ(chunk_for(24 * kMiB, 1, 4 * kMiB, 12), 2 * kMiB);
  // Pieces are whole pages and whole blocks, whatever the share works out to.
  for (const std::size_t block :
       {std::size_t{1}, std::size_t{512}, std::size_t{4096}, std::size_t{65536}}) {
    for (const std::size_t size : {kMiB + 1, 5 * kMiB + 123, 13 * kMiB + 7}) {
      const std::size_t chunk = chunk_for(size, block, 16 * kMiB, 7);
      EXPECT_EQ(chunk % block, 0U) << size << " with blocks of " << block;
      EXPECT_EQ(chunk % 4096, 0U) << size << " with blocks of " << block;
      EXPECT_GE(chunk, kMinSpreadChunk);
      EXPECT_LE(chunk, 16 * kMiB);
    }
  }
  // One worker, or a transfer no larger than a piece: the configured chunk.
  EXPECT_EQ(chunk_for(8 * kMiB, 1, 4 * kMiB, 1), 4 * kMiB);
  EXPECT_EQ(chunk_for(kMinSpreadChunk, 1, 4 * kMiB, 12), 4 * kMiB);
  // A configured chunk below a block still moves whole blocks.
  EXPECT_EQ(chunk_for(4096, 4096, 512, 12), 4096U);
}

TEST_F(CompatEngine, IoRequestIsRefusedWithoutAHostView) {
  Zeroed z(4096);
  write_pattern_file(dir_ / "in", 4096, kSeed);
  File f(dir_ / "in", O_RDONLY);
  EXPECT_FALSE(z.dev.capabilities().host_view);
  EXPECT_EQ(z.reg.host_view(), nullptr);
  try {
    (void)IoRequest::read(f, z.reg, 0, 4096, 0);
    FAIL() << "expected ENOTSUP";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOTSUP);
    EXPECT_NE(std::string(e.what()).find("IoRequest: the compat engine has no host view"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(CompatShapes, ReadsLandByteForByte) {
  const auto [direct, shape] = GetParam();
  const std::size_t mem_size = shape.reg_offset + shape.size + 4096;
  write_pattern_file(dir_ / "in", shape.file_offset + shape.size + 5000, kSeed);
  FakeDeviceMemory mem(mem_size);
  mem.fill(std::byte{0xee});
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "in", O_RDONLY, 0644, direct);
  ASSERT_EQ(f.read(reg, shape.reg_offset, shape.size, shape.file_offset), shape.size);
  expect_read_landed(mem.download(), shape.reg_offset, shape.size, shape.file_offset,
                     std::byte{0xee});
}

TEST_P(CompatShapes, WritesLandByteForByte) {
  const auto [direct, shape] = GetParam();
  FakeDeviceMemory mem(shape.reg_offset + shape.size);
  mem.upload(pattern(shape.size, shape.file_offset), shape.reg_offset);
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem.data(), mem.size());
  {
    File f(dir_ / "out", O_RDWR | O_CREAT, 0644, direct);
    ASSERT_EQ(f.write(reg, shape.reg_offset, shape.size, shape.file_offset), shape.size);
  }
  const auto file = read_whole_file(dir_ / "out");
  ASSERT_EQ(file.size(), shape.file_offset + shape.size);
  const auto found =
      find_mismatch({file.data() + shape.file_offset, shape.size}, kSeed, shape.file_offset);
  EXPECT_FALSE(found.has_value()) << "file byte " << *found << " is not what the GPU held";
}

TEST_F(CompatEngine, EndOfFileGivesShortReads) {
  constexpr std::size_t kFile = (std::size_t{3} << 20) + 999;
  write_pattern_file(dir_ / "in", kFile, kSeed);
  const Zeroed z(std::size_t{8} << 20);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "in", O_RDONLY);
  EXPECT_EQ(f.read(reg, 0, std::size_t{8} << 20, 4096), kFile - 4096);
  expect_read_landed(mem.download(), 0, kFile - 4096, 4096, std::byte{0});
  EXPECT_EQ(f.read(reg, 0, 4096, kFile), 0U);
}

// Copy threads that poll before they sleep (copy_spin_us), or sleep at
// once, lose no chunk and finish no read early, with callers reading back
// to back from several threads; a pool whose threads poll for 10 ms still
// stops when its engine goes.
TEST_F(CompatEngine, PollingCopyThreadsLoseNothing) {
  constexpr std::size_t kPiece = (std::size_t{4} << 20) + 4096;  // spread over the workers
  constexpr int kThreads = 3;
  constexpr int kRounds = 12;
  write_pattern_file(dir_ / "in", kPiece * kThreads, kSeed);
  for (const unsigned spin : {0U, 100U, 10000U}) {
    SCOPED_TRACE("copy_spin_us " + std::to_string(spin));
    (void)release_idle_engines();
    Options o = Options::defaults();
    o.engine = Engine::compat;
    o.copy_threads = 4;
    o.copy_spin_us = spin;
    {
      FakeDeviceMemory mem(kPiece * kThreads);
      auto dev = Device::open(0, o);
      auto reg = dev.register_memory(mem.data(), mem.size());
      File f(dir_ / "in", O_RDONLY);
      for (int round = 0; round < kRounds; ++round) {
        mem.fill(std::byte{0});
        std::vector<std::size_t> got(kThreads, 0);
        {
          std::vector<std::jthread> threads;
          for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
              const auto i = static_cast<std::size_t>((t + round) % kThreads);
              got[static_cast<std::size_t>(t)] = f.read(reg, i * kPiece, kPiece, i * kPiece);
            });
          }
        }
        for (const std::size_t n : got) {
          ASSERT_EQ(n, kPiece) << "round " << round;
        }
        expect_read_landed(mem.download(), 0, kPiece * kThreads, 0, std::byte{0});
      }
    }
    const auto start = std::chrono::steady_clock::now();
    (void)release_idle_engines();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

// The caller of a multi-piece read moves pieces of it itself while the copy
// threads are busy: one copy thread whose every copy takes 20 ms (the
// fake's stream delay) has not finished its first two pieces when the
// caller, never asleep, has claimed its own.  Pieces larger than an inline
// lane go in lane-sized steps; every byte lands.
TEST_F(CompatEngine, TheCallerMovesPiecesOfItsOwnRead) {
  constexpr std::size_t kSize = (std::size_t{6} << 20) + 4096 + 77;
  write_pattern_file(dir_ / "in", kSize + 4096, kSeed);
  detail::CopyPoolConfig config;
  config.threads = 1;
  config.chunk = std::size_t{3} << 19;  // 1.5 MiB pieces: two lane steps each
  config.direct_chunk = config.chunk;
  config.depth = 2;
  config.spin_us = 0;
  auto gpu = std::make_shared<const detail::cuda::Gpu>(0);
  FakeDeviceMemory mem(kSize);
  mem.fill(std::byte{0});
  const int fd = ::open((dir_ / "in").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    detail::CopyPool pool(gpu, config);
    phx_fake_cuda_set_op_delay_us(20000);
    const detail::TransferResult r =
        pool.run(detail::Direction::read, fd, reinterpret_cast<std::uintptr_t>(mem.data()), kSize,
                 4096, detail::IoPolicy{});
    phx_fake_cuda_set_op_delay_us(0);
    EXPECT_EQ(r.error, 0) << r.detail;
    EXPECT_EQ(r.done, kSize);
    const detail::CopyPoolStats stats = pool.stats();
    EXPECT_EQ(stats.worker_pieces + stats.caller_pieces, 5U);  // 6 MiB + 4173 in 1.5 MiB pieces
    EXPECT_GE(stats.caller_pieces, 1U);
    EXPECT_GE(stats.worker_pieces, 1U);
  }
  ::close(fd);
  expect_read_landed(mem.download(), 0, kSize, 4096, std::byte{0});
}

TEST_F(CompatEngine, ThreadsShareOneRegistration) {
  constexpr std::size_t kPiece = (std::size_t{2} << 20) + 4096;
  constexpr int kThreads = 8;
  write_pattern_file(dir_ / "in", kPiece * kThreads, kSeed);
  const Zeroed z(kPiece * kThreads);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "in", O_RDONLY);
  std::vector<std::size_t> got(kThreads, 0);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        // Interleaved pieces: neighbours in memory are read by different threads.
        const auto i = static_cast<std::size_t>((t * 3) % kThreads);
        got[static_cast<std::size_t>(t)] = f.read(reg, i * kPiece, kPiece, i * kPiece);
      });
    }
  }
  for (const std::size_t n : got) {
    EXPECT_EQ(n, kPiece);
  }
  expect_read_landed(mem.download(), 0, kPiece * kThreads, 0, std::byte{0});
}

TEST_F(CompatEngine, RefusesWhatIsNotDeviceMemoryOfItsGpu) {
  auto dev = Device::open(0, Engine::compat);
  const auto refused = [&](void *address, std::size_t size, int err, const std::string &words) {
    try {
      (void)dev.register_memory(address, size);
      ADD_FAILURE() << "registered " << words;
    } catch (const std::system_error &e) {
      EXPECT_EQ(e.code().value(), err) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  AlignedBuffer host(8192);
  refused(host.data(), host.size(), EFAULT, "is not CUDA memory");
  void *pinned = nullptr;
  {
    const FakeContext scope(fake_ordinal(0));
    ASSERT_EQ(cuMemHostAlloc(&pinned, 8192, 0), 0);
  }
  refused(pinned, 8192, EFAULT, "host memory known to CUDA");
  ASSERT_EQ(cuMemFreeHost(pinned), 0);
  FakeDeviceMemory mem(65536);
  refused(mem.data(), 65536 + 4096, EFAULT, "runs past the end of its CUDA allocation");
  FakeDeviceMemory other(65536, 1);
  refused(other.data(), 65536, EINVAL, "is memory of CUDA GPU " + std::to_string(fake_ordinal(1)));
}

// Freed behind the library's back, and then allocated again at the same
// address (as a caching allocator would): I/O through the old registration
// must fail, not write into the new owner's memory.
TEST_F(CompatEngine, IoIntoFreedOrReallocatedMemoryFailsClearly) {
  write_pattern_file(dir_ / "in", 65536, kSeed);
  auto mem = std::make_unique<FakeDeviceMemory>(65536);
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem->data(), mem->size());
  void *const address = mem->data();
  mem->release();
  File f(dir_ / "in", O_RDONLY);
  const auto refused = [&](const char *when) {
    try {
      (void)f.read(reg, 0, 65536, 0);
      ADD_FAILURE() << "read into memory " << when << " succeeded";
    } catch (const std::system_error &e) {
      EXPECT_EQ(e.code().value(), EFAULT) << e.what();
      EXPECT_NE(std::string(e.what()).find("freed while registered"), std::string::npos)
          << e.what();
    }
  };
  refused("freed");
  const FakeDeviceMemory next(65536);
  ASSERT_EQ(next.data(), address) << "the fake driver did not hand the address out again";
  next.fill(std::byte{0x77});
  refused("freed and allocated again");
  const auto untouched = next.download();
  EXPECT_EQ(std::count(untouched.begin(), untouched.end(), std::byte{0x77}), 65536)
      << "the new allocation's bytes changed";
  // Once the stale registration is gone, the new allocation registers and works.
  reg.release();
  auto fresh = dev.register_memory(next.data(), next.size());
  EXPECT_EQ(f.read(fresh, 0, 65536, 0), 65536U);
}

// read_async/write_async on memory freed since it was registered are
// refused when called, with the file, offset and size named.
TEST_F(CompatEngine, AsyncIoIntoFreedMemoryIsRefused) {
  write_pattern_file(dir_ / "in", 65536, kSeed);
  auto mem = std::make_unique<FakeDeviceMemory>(65536);
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem->data(), mem->size());
  mem.reset();
  const FakeDeviceMemory next(65536);  // most likely at the same address
  File f(dir_ / "in", O_RDWR);
  const FakeStream stream;
  ssize_t done = -7;
  for (const bool write : {false, true}) {
    try {
      if (write) {
        f.write_async(reg, 0, 65536, 0, &done, stream.get());
      } else {
        f.read_async(reg, 0, 65536, 4096, &done, stream.get());
      }
      ADD_FAILURE() << (write ? "write_async" : "read_async") << " on freed memory was accepted";
    } catch (const std::system_error &e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code().value(), EFAULT) << what;
      EXPECT_NE(what.find("freed while registered"), std::string::npos) << what;
      EXPECT_NE(what.find("65536"), std::string::npos) << what;
    }
  }
  stream.synchronize();
  EXPECT_EQ(done, -7) << "a refused operation reported a result";
}

// A copy the driver refuses fails the read with the file, offset and size
// named, and the next read is whole: no chunk is left behind.
TEST_F(CompatEngine, CudaCopyFailureIsReportedAndRecovered) {
  constexpr std::size_t kSize = (std::size_t{40} << 20) + 4096;  // several chunks
  write_pattern_file(dir_ / "in", kSize, kSeed);
  const Zeroed z(kSize);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "in", O_RDONLY);
  // An inline lane's only copy, then a worker's second chunk.
  for (const auto &[size, nth] : {std::pair{std::size_t{65536}, 1U}, std::pair{kSize, 2U}}) {
    phx_fake_cuda_fail_call("cuMemcpyHtoDAsync", nth, 999);
    try {
      (void)f.read(reg, 0, size, 0);
      ADD_FAILURE() << "a failed copy went unnoticed (" << size << " bytes)";
    } catch (const std::system_error &e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("in"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(size)), std::string::npos) << what;
    }
    phx_fake_cuda_clear_failures();
  }
  ASSERT_EQ(f.read(reg, 0, kSize, 0), kSize);
  expect_read_landed(mem.download(), 0, kSize, 0, std::byte{0});
}

// The copy threads' staging is pinned ahead by one thread, threads x depth
// slots and no more, however many reads follow, each registered (4 MiB
// slots: PinnedBuffer::staging), or the driver's allocation where
// registering one fails; when pinning ahead fails altogether part way, the
// workers pin their own and every byte still lands.
TEST_F(CompatEngine, StagingPinnedAheadOnceAndRecoveredFromFailure) {
  constexpr std::size_t kSize = (std::size_t{24} << 20) + 4096;  // chunks for every slot
  write_pattern_file(dir_ / "in", kSize, kSeed);
  Options three = Options::defaults();
  three.engine = Engine::compat;
  three.copy_threads = 3;
  three.copy_depth = 2;
  constexpr long kSlots = 3 * 2;
  const auto settled = [](long want) {
    for (int i = 0; i < 2000 && fake_counts().host_allocs != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return fake_counts().host_allocs;
  };
  struct Case {
    unsigned register_fails;  // the pinner's nth registration fails (0: none)
    bool fallback_fails;      // and the allocation it falls back to
  };
  for (const Case c :
       {Case{0, false}, Case{1, false}, Case{4, false}, Case{1, true}, Case{4, true}}) {
    (void)release_idle_engines();
    const auto idle = fake_counts();
    if (c.register_fails != 0) {
      phx_fake_cuda_fail_call("cuMemHostRegister_v2", c.register_fails, 2);
    }
    if (c.fallback_fails) {
      // The lanes' 1 MiB buffers are the pool's first cuMemHostAlloc calls
      // (too small to register); the pinner's fallback comes next.
      phx_fake_cuda_fail_call("cuMemHostAlloc",
                              static_cast<unsigned>(detail::CopyPool::kInlineLanes) + 1, 2);
    }
    const std::string what = "registration " + std::to_string(c.register_fails) + " failing" +
                             (c.fallback_fails ? ", its fallback too" : "");
    {
      FakeDeviceMemory mem(kSize);
      auto dev = Device::open(0, three);
      auto reg = dev.register_memory(mem.data(), mem.size());
      // Buffered: its 4 MiB chunks fit the slots pinned ahead, so no worker
      // pins a larger one of its own while the pinner runs and the
      // injected failure can only meet the pinner (O_DIRECT's larger
      // chunks would race it for the failing call).
      File f(dir_ / "in", O_RDONLY, 0644, DirectIo::off);
      for (int round = 0; round < 3; ++round) {
        mem.fill(std::byte{0});
        ASSERT_EQ(f.read(reg, 0, kSize, 0), kSize) << what;
        expect_read_landed(mem.download(), 0, kSize, 0, std::byte{0});
      }
      phx_fake_cuda_clear_failures();
      if (!c.fallback_fails) {
        const long want =
            idle.host_allocs + static_cast<long>(detail::CopyPool::kInlineLanes) + kSlots;
        EXPECT_EQ(settled(want), want) << what << ": staging beyond threads x depth, or missing";
        EXPECT_EQ(fake_counts().host_registered,
                  idle.host_registered + kSlots - (c.register_fails != 0 ? 1 : 0))
            << what;
      }
    }
    EXPECT_EQ(release_idle_engines(), 1U);
    EXPECT_EQ(fake_counts().host_allocs, idle.host_allocs)
        << what << ": pinned staging outlived its engine";
    EXPECT_EQ(fake_counts().host_registered, idle.host_registered) << what;
  }
}

// Slow copies: a read may return only once its copies are done, not when
// the file's bytes are in staging (the download does not wait for streams).
TEST_F(CompatEngine, ReadsWaitForTheirCopies) {
  constexpr std::size_t kSize = (std::size_t{40} << 20) + 4096;
  write_pattern_file(dir_ / "in", kSize, kSeed);
  FakeDeviceMemory mem(kSize);
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "in", O_RDONLY);
  phx_fake_cuda_set_op_delay_us(200000);                       // far longer than a download takes
  for (const std::size_t size : {std::size_t{4096}, kSize}) {  // an inline lane, the workers
    mem.fill(std::byte{0});
    ASSERT_EQ(f.read(reg, 0, size, 0), size);
    const auto memory = mem.download();
    const auto found = find_mismatch({memory.data(), size}, kSeed, 0);
    ASSERT_FALSE(found.has_value()) << "byte " << *found << " of " << size << " not copied yet";
  }
}

TEST_F(CompatEngine, ReadAsyncRunsAfterTheWorkBeforeIt) {
  constexpr std::size_t kSize = (std::size_t{12} << 20) + 77;
  write_pattern_file(dir_ / "in", kSize + 1000, kSeed);
  const Zeroed z(kSize);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "in", O_RDONLY);
  const FakeStream stream;
  ssize_t done = -7;
  // A slow "kernel" fills the buffer first: the read must land after it.
  ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), mem.device_pointer(), kSize, 0x11, 200000), 0);
  f.read_async(reg, 0, kSize, 1000, &done, stream.get());
  stream.synchronize();
  ASSERT_EQ(done, static_cast<ssize_t>(kSize));
  const auto memory = mem.download();
  const auto found = find_mismatch(memory, kSeed, 1000);
  EXPECT_FALSE(found.has_value()) << "byte " << *found << " is not the file's";
}

// The stream's later work (here a copy back) must wait for the file's
// bytes, not only for the read to be enqueued.
TEST_F(CompatEngine, WorkAfterReadAsyncSeesTheFile) {
  constexpr std::size_t kSize = (std::size_t{40} << 20) + 4096;
  write_pattern_file(dir_ / "in", kSize, kSeed);
  const Zeroed z(kSize);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "in", O_RDONLY);
  const FakeStream stream;
  ssize_t done = -7;
  f.read_async(reg, 0, kSize, 0, &done, stream.get());
  std::vector<std::byte> seen(kSize);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(seen.data(), mem.device_pointer(), kSize, stream.get()), 0);
  stream.synchronize();
  ASSERT_EQ(done, static_cast<ssize_t>(kSize));
  const auto found = find_mismatch(seen, kSeed, 0);
  EXPECT_FALSE(found.has_value()) << "the copy after the read saw byte " << *found
                                  << " before the file's";
}

TEST_F(CompatEngine, WriteAsyncWritesWhatTheStreamProduced) {
  constexpr std::size_t kSize = (std::size_t{10} << 20) + 123;
  const Zeroed z(kSize);
  FakeDeviceMemory &mem = *z.memory;
  const Registration &reg = z.reg;
  File f(dir_ / "out", O_RDWR | O_CREAT);
  const FakeStream stream;
  ssize_t done = -7;
  ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), mem.device_pointer(), kSize, 0x5a, 200000), 0);
  f.write_async(reg, 0, kSize, 4096, &done, stream.get());
  stream.synchronize();
  ASSERT_EQ(done, static_cast<ssize_t>(kSize));
  const auto file = read_whole_file(dir_ / "out");
  ASSERT_EQ(file.size(), kSize + 4096);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kSize; ++i) {
    wrong += file[4096 + i] != std::byte{0x5a} ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0U) << "bytes of the file that are not what the stream wrote before";
}

// A read after a stream-ordered write of the same bytes, on the same stream,
// reads what the write put there: reads go ahead of their stream only while
// no stream-ordered write is pending.
TEST_F(CompatEngine, ReadAsyncAfterWriteAsyncSeesTheWrite) {
  constexpr std::size_t kSize = (std::size_t{6} << 20) + 4096;
  write_pattern_file(dir_ / "f", kSize, kSeed);  // what an early read would see
  const Zeroed source(kSize);
  const Zeroed target(kSize);
  File f(dir_ / "f", O_RDWR);
  const FakeStream stream;
  ssize_t wrote = -7;
  ssize_t read = -7;
  ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), source.memory->device_pointer(), kSize, 0x3c,
                                       200000),
            0);
  f.write_async(source.reg, 0, kSize, 0, &wrote, stream.get());
  f.read_async(target.reg, 0, kSize, 0, &read, stream.get());
  stream.synchronize();
  ASSERT_EQ(wrote, static_cast<ssize_t>(kSize));
  ASSERT_EQ(read, static_cast<ssize_t>(kSize));
  const auto memory = target.memory->download();
  std::size_t wrong = 0;
  for (const std::byte b : memory) {
    wrong += b != std::byte{0x3c} ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0U) << "bytes read before the write before them reached the file";
}

// Opening, using and closing devices leaves no stream, event, pinned or
// device memory or context behind but the engine kept for the next open,
// which release_idle_engines() stops (the first round may set up
// per-process state, so the second is compared with the first).
TEST_F(CompatEngine, DevicesLeaveNoHandlesBehind) {
  write_pattern_file(dir_ / "in", std::size_t{3} << 20, kSeed);
  const auto round = [&] {
    FakeDeviceMemory mem(std::size_t{3} << 20);
    auto dev = Device::open(0, Engine::compat);
    auto reg = dev.register_memory(mem.data(), mem.size());
    File f(dir_ / "in", O_RDONLY);
    EXPECT_EQ(f.read(reg, 0, std::size_t{3} << 20, 0), std::size_t{3} << 20);
    EXPECT_EQ(f.read(reg, 0, 4096, 0), 4096U);
  };
  round();
  EXPECT_EQ(release_idle_engines(), 1U);
  const auto before = fake_counts();
  round();
  round();
  EXPECT_EQ(release_idle_engines(), 1U);
  const auto after = fake_counts();
  EXPECT_EQ(after.streams, before.streams);
  EXPECT_EQ(after.events, before.events);
  EXPECT_EQ(after.host_allocs, before.host_allocs);
  EXPECT_EQ(after.device_allocs, before.device_allocs);
  EXPECT_EQ(after.contexts, before.contexts);
  EXPECT_GT(after.copies, before.copies);
}

// Devices of one GPU open at the same time with the same options share one
// engine (copy threads, streams, staging); other options get their own; the
// last close of an engine stops it unless it is the device's latest, which
// stays for the next open until release_idle_engines().  Bytes land through
// each device either way.
TEST_F(CompatEngine, OpenDevicesShareOneEngine) {
  constexpr std::size_t kSize = std::size_t{3} << 20;
  write_pattern_file(dir_ / "in", kSize, kSeed);
  (void)release_idle_engines();
  const auto read_through = [&](Device &dev) {
    FakeDeviceMemory mem(kSize);
    mem.fill(std::byte{0});
    auto reg = dev.register_memory(mem.data(), mem.size());
    File f(dir_ / "in", O_RDONLY);
    EXPECT_EQ(f.read(reg, 0, kSize, 0), kSize);
    expect_read_landed(mem.download(), 0, kSize, 0, std::byte{0});
  };
  const auto idle = fake_counts();
  {
    auto first = Device::open(0, Engine::compat);
    read_through(first);
    const auto one = fake_counts();
    EXPECT_GT(one.streams, idle.streams);  // the engine's copy threads' streams
    {
      auto second = Device::open(0, Engine::compat);
      read_through(second);
      EXPECT_EQ(fake_counts().streams, one.streams) << "a second engine was built";
      Options fewer = Options::defaults();
      fewer.engine = Engine::compat;
      fewer.copy_threads = 2;
      auto other = Device::open(0, fewer);
      read_through(other);
      EXPECT_GT(fake_counts().streams, one.streams) << "other options share the engine";
    }
    // The first engine lives on with `first`; the other, the latest, is kept.
    EXPECT_GT(fake_counts().streams, one.streams);
    read_through(first);
  }
  const auto closed = fake_counts();
  EXPECT_GT(closed.streams, idle.streams) << "the latest engine was not kept";
  EXPECT_EQ(release_idle_engines(), 1U);
  const auto released = fake_counts();
  EXPECT_EQ(released.streams, idle.streams);
  EXPECT_EQ(released.host_allocs, idle.host_allocs);
  EXPECT_EQ(released.events, idle.events);
}

// Opens a compat device, reads the first @p size bytes of @p path through
// it into zeroed device memory, closes it; whether every byte landed.
// Whether a thread of this process is named @name (its comm), up to 10 s
// after which it still is: false once it has exited.
bool thread_still_named(const std::string &name) {
  for (int i = 0; i < 2000; ++i) {
    bool found = false;
    std::error_code ec;
    for (const auto &task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream comm(task.path() / "comm");
      std::string line;
      found = found || (std::getline(comm, line) && line == name);
    }
    if (!found) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool read_through_new_device(const std::filesystem::path &path, std::size_t size) {
  FakeDeviceMemory mem(size);
  mem.fill(std::byte{0});
  auto dev = Device::open(0, Engine::compat);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(path, O_RDONLY);
  return f.read(reg, 0, size, 0) == size && !find_mismatch(mem.download(), kSeed, 0).has_value();
}

// The engine kept after the last close serves the next open as it is:
// no new streams, events or pinned memory; reads through it land.  An
// engine a device still uses is not idle: release_idle_engines() leaves it
// to that device's close, which then stops it.
TEST_F(CompatEngine, KeptEngineServesTheNextOpen) {
  constexpr std::size_t kSize = std::size_t{256} << 10;  // an inline lane's
  write_pattern_file(dir_ / "in", kSize, kSeed);
  (void)release_idle_engines();
  const auto idle = fake_counts();
  const auto load = [&] { EXPECT_TRUE(read_through_new_device(dir_ / "in", kSize)); };
  load();
  const auto kept = fake_counts();
  EXPECT_GT(kept.streams, idle.streams);
  EXPECT_GT(kept.host_allocs, idle.host_allocs);
  load();
  const auto again = fake_counts();
  EXPECT_EQ(again.streams, kept.streams) << "the next open built a new engine";
  EXPECT_EQ(again.events, kept.events);
  EXPECT_EQ(again.host_allocs, kept.host_allocs);
  EXPECT_GT(again.copies, kept.copies);
  {
    auto dev = Device::open(0, Engine::compat);
    EXPECT_EQ(release_idle_engines(), 0U) << "an engine in use counted as idle";
    EXPECT_EQ(fake_counts().streams, kept.streams);
  }
  const auto closed = fake_counts();
  EXPECT_EQ(closed.streams, idle.streams);
  EXPECT_EQ(closed.host_allocs, idle.host_allocs);
  EXPECT_EQ(release_idle_engines(), 0U);
}

// Phoenix ids follow PCI bus order; the fake's buses descend as CUDA's
// ordinals ascend, so each id's ordinal is the other end's.
TEST_F(CompatEngine, CudaOrdinalIsTheGpuInPciOrder) {
  for (int id = 0; id < kFakeGpus; ++id) {
    EXPECT_EQ(cuda_ordinal(id), fake_ordinal(id)) << "device " << id;
  }
  EXPECT_EQ(cuda_ordinal(kFakeGpus), -1);
  EXPECT_EQ(cuda_ordinal(-1), -1);
}

// A child of fork() has none of its parent's copy threads: it must not be
// handed the engine the parent kept (its jobs would wait for threads that
// do not exist), but build its own and read through it.
TEST_F(CompatEngine, ForkedChildBuildsItsOwnEngine) {
  constexpr std::size_t kSize = std::size_t{3} << 20;  // through the copy threads
  write_pattern_file(dir_ / "in", kSize, kSeed);
  const auto load = [&] { return read_through_new_device(dir_ / "in", kSize); };
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not run threads started after a multi-threaded fork";
#endif
  (void)release_idle_engines();
  const long idle = fake_counts().host_allocs;
  ASSERT_TRUE(load());  // the parent's engine, kept
  // Its pinner may still be pinning staging, holding the fake driver's
  // lock at times; a child forked then would inherit that lock held and
  // hang in the fake (the real driver cannot be used after fork at all).
  const Options o = Options::defaults();
  const long pinned = idle + static_cast<long>(detail::CopyPool::kInlineLanes) +
                      static_cast<long>(o.copy_threads) * static_cast<long>(o.copy_depth);
  for (int i = 0; i < 2000 && fake_counts().host_allocs < pinned; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(fake_counts().host_allocs, pinned) << "the pinner never finished";
  // Nor while the pinner's thread exits: the sanitizers' runtimes (GCC 12's
  // ASan) take locks there that a child forked meanwhile inherits held, and
  // it then hangs starting its own threads.
  ASSERT_FALSE(thread_still_named("phx-pin")) << "the pinner's thread never exited";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(30);  // a hang fails the test instead of stalling the suite
    std::_Exit(load() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's read did not land";
  EXPECT_TRUE(load()) << "the parent's kept engine no longer works";
  (void)release_idle_engines();
}

}  // namespace
}  // namespace phx::test
