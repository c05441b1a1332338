// SPDX-License-Identifier: MIT
// The compat engine (and the cuFile baseline) against host reads, byte for
// byte: sizes from 1 B to 4 GiB, unaligned everything, end of file, many
// threads, both directions, the C API, bad pointers, several GPUs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/device_state.hpp"
#include "engines/engine_backend.hpp"
#include "gpu_support.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 2024;

std::vector<std::byte> host_pread(const std::filesystem::path &path, std::size_t size,
                                  std::uint64_t offset) {
  std::vector<std::byte> out(size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error("open " + path.string());
  }
  std::size_t done = 0;
  while (done < size) {
    const ssize_t r =
        ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (r <= 0) {
      break;
    }
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

class CompatIo : public GpuTest, public ::testing::WithParamInterface<DirectIo> {};

TEST_P(CompatIo, ReadsMatchHostReadsForEverySizeAndAlignment) {
  const std::uint64_t file_size = (std::uint64_t{64} << 20) + 12345;
  write_pattern_file(dir_ / "f", file_size, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(std::size_t{64} << 20);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "f", O_RDONLY, 0644, GetParam());
  const std::array<std::size_t, 10> sizes = {1,
                                             7,
                                             4095,
                                             4096,
                                             4097,
                                             65536 + 13,
                                             1 << 20,
                                             (16 << 20) - 1,
                                             (16 << 20) + 4097,
                                             (48 << 20) + 5};
  for (const std::size_t size : sizes) {
    for (const std::uint64_t file_offset :
         {std::uint64_t{0}, std::uint64_t{12345}, std::uint64_t{1} << 20}) {
      for (const std::size_t mem_offset : {std::size_t{0}, std::size_t{3}, std::size_t{4096}}) {
        SCOPED_TRACE("size " + std::to_string(size) + " file offset " +
                     std::to_string(file_offset) + " memory offset " + std::to_string(mem_offset));
        mem.fill(0xee);
        ASSERT_EQ(f.read(reg, mem_offset, size, file_offset), size);
        const auto got = mem.to_host(mem_offset, size);
        const auto want = host_pread(dir_ / "f", size, file_offset);
        ASSERT_EQ(got, want);
        // Nothing around the target was touched.
        if (mem_offset > 0) {
          EXPECT_EQ(mem.to_host(mem_offset - 1, 1)[0], std::byte{0xee});
        }
        if (mem_offset + size < mem.size()) {
          EXPECT_EQ(mem.to_host(mem_offset + size, 1)[0], std::byte{0xee});
        }
      }
    }
  }
}

TEST_P(CompatIo, EndOfFileGivesShortReads) {
  write_pattern_file(dir_ / "f", 1000003, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(std::size_t{4} << 20);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "f", O_RDONLY, 0644, GetParam());
  EXPECT_EQ(f.read(reg, 0, mem.size(), 0), 1000003U);
  EXPECT_EQ(mem.to_host(0, 1000003), host_pread(dir_ / "f", 1000003, 0));
  EXPECT_EQ(f.read(reg, 5, 100000, 999999), 4U);
  EXPECT_EQ(mem.to_host(5, 4), host_pread(dir_ / "f", 4, 999999));
  EXPECT_EQ(f.read(reg, 0, 4096, 1000003), 0U);
  EXPECT_EQ(f.read(reg, 0, 4096, 5000000), 0U);
}

TEST_P(CompatIo, WritesLandByteForByte) {
  const std::uint64_t file_size = std::uint64_t{40} << 20;
  write_pattern_file(dir_ / "f", file_size, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(std::size_t{40} << 20);
  std::vector<std::byte> src(mem.size());
  fill_pattern(src, 99, 0);
  mem.upload(0, src.data(), src.size());
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "f", O_RDWR, 0644, GetParam());
  struct Case {
    std::size_t mem_offset, size;
    std::uint64_t file_offset;
  };
  std::vector<std::byte> expect = host_pread(dir_ / "f", file_size, 0);
  for (const Case c :
       {Case{0, 1, 0}, Case{1, 4095, 7}, Case{4096, 4096, 8192}, Case{3, (17 << 20) + 5, 12345},
        Case{0, 33 << 20, 4096}, Case{100, (6 << 20) + 1, file_size - 77}}) {
    SCOPED_TRACE("write " + std::to_string(c.size) + " at " + std::to_string(c.file_offset));
    ASSERT_EQ(f.write(reg, c.mem_offset, c.size, c.file_offset), c.size);
    if (expect.size() < c.file_offset + c.size) {
      expect.resize(c.file_offset + c.size);
    }
    std::memcpy(expect.data() + c.file_offset, src.data() + c.mem_offset, c.size);
    ASSERT_EQ(read_whole_file(dir_ / "f"), expect);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CompatIo, ::testing::Values(DirectIo::preferred, DirectIo::off),
                         [](const auto &param_info) {
                           return param_info.param == DirectIo::off ? "Buffered" : "Direct";
                         });

TEST_F(GpuTest, AutoPicksCompatWithoutTheModule) {
  if (::access("/dev/phxfs_dev0", F_OK) == 0) {
    GTEST_SKIP() << "the phxfs module serves device 0 here: auto is direct";
  }
  auto dev = Device::open(0);
  EXPECT_EQ(dev.engine(), Engine::compat) << dev.engine_reason();
  EXPECT_NE(dev.engine_reason().find("CUDA GPU"), std::string::npos) << dev.engine_reason();
}

TEST_F(GpuTest, FourGiBInOneRead) {
  const std::uint64_t size = (std::uint64_t{4} << 30) + 4097;
  write_pattern_file(dir_ / "big", size, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(size);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "big", O_RDONLY);
  ASSERT_EQ(f.read(reg, 0, size, 0), size);
  constexpr std::size_t kStep = std::size_t{256} << 20;
  for (std::uint64_t at = 0; at < size; at += kStep) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kStep, size - at));
    const auto got = mem.to_host(at, n);
    ASSERT_EQ(find_mismatch(got, kSeed, at), std::nullopt) << "at " << at;
  }
}

TEST_F(GpuTest, ManyThreadsShareOneRegistration) {
  constexpr std::size_t kThreads = 16;
  constexpr std::size_t kPiece = (std::size_t{3} << 20) + 333;
  write_pattern_file(dir_ / "f", kThreads * kPiece + 4096, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory mem(kThreads * kPiece);
  auto reg = dev.register_memory(mem.data(), mem.size());
  File f(dir_ / "f", O_RDONLY);
  std::vector<std::thread> threads;
  std::array<std::size_t, kThreads> got{};
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Reversed placement: thread t's bytes land in slot kThreads-1-t.
      got[t] = f.read(reg, (kThreads - 1 - t) * kPiece, kPiece, t * kPiece + 11);
    });
  }
  for (auto &th : threads) {
    th.join();
  }
  for (std::size_t t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[t], kPiece);
    EXPECT_EQ(
        find_mismatch(mem.to_host((kThreads - 1 - t) * kPiece, kPiece), kSeed, t * kPiece + 11),
        std::nullopt)
        << "thread " << t;
  }
}

TEST_F(GpuTest, CApiPaperSequence) {
  write_pattern_file(dir_ / "f", 3 << 20, kSeed);
  ASSERT_EQ(phxfs_open_engine(0, PHXFS_ENGINE_COMPAT), 0) << phxfs_last_error();
  DeviceMemory mem(4 << 20);
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), mem.size(), &target), 0) << phxfs_last_error();
  EXPECT_EQ(target, mem.data());  // no host view: the device address itself
  const int fd = ::open((dir_ / "f").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const phxfs_fileid_t fid{fd, 0};
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 3 << 20, 0), 3 << 20) << phxfs_last_error();
  EXPECT_EQ(find_mismatch(mem.to_host(0, 3 << 20), kSeed, 0), std::nullopt);
  EXPECT_EQ(phxfs_read(fid, mem.data(), 4097, 5000, 12345), 5000);
  EXPECT_EQ(find_mismatch(mem.to_host(4097, 5000), kSeed, 12345), std::nullopt);
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 8192, (3 << 20) - 100), 100);
  // Write the file's first MiB back at an odd offset, read it through the host.
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 1 << 20, 0), 1 << 20);
  EXPECT_EQ(phxfs_write(fid, mem.data(), 0, 1 << 20, 777), 1 << 20) << phxfs_last_error();
  const auto file = read_whole_file(dir_ / "f");
  EXPECT_EQ(find_mismatch({file.data() + 777, 1 << 20}, kSeed, 0), std::nullopt);
  EXPECT_EQ(find_mismatch({file.data(), 777}, kSeed, 0), std::nullopt);
  ::close(fd);
  EXPECT_EQ(phxfs_deregmem(0, mem.data(), mem.size()), 0);
  EXPECT_EQ(phxfs_close(0), 0);
}

TEST_F(GpuTest, BadPointersAreRefusedClearly) {
  auto dev = Device::open(0, Engine::compat);
  std::vector<std::byte> heap(1 << 20);
  try {
    (void)dev.register_memory(heap.data(), heap.size());
    ADD_FAILURE() << "host heap memory registered as device memory";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EFAULT);
    EXPECT_NE(std::string(e.what()).find("not CUDA memory"), std::string::npos) << e.what();
  }
  void *pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 1 << 20));
  try {
    (void)dev.register_memory(pinned, 1 << 20);
    ADD_FAILURE() << "pinned host memory registered as device memory";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EFAULT);
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  CUDA_OK(cudaFreeHost(pinned));
  {
    DeviceMemory freed(1 << 20);
    void *address = freed.data();
    freed.free_now();
    try {
      (void)dev.register_memory(address, 1 << 20);
      ADD_FAILURE() << "freed device memory registered";
    } catch (const std::system_error &e) {
      EXPECT_EQ(e.code().value(), EFAULT);
      EXPECT_NE(std::string(e.what()).find("freed"), std::string::npos) << e.what();
    }
  }
  {
    DeviceMemory small(1 << 20);
    try {
      (void)dev.register_memory(small.data(), 2 << 20);
      ADD_FAILURE() << "range past the allocation registered";
    } catch (const std::system_error &e) {
      EXPECT_EQ(e.code().value(), EFAULT);
      EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
    }
  }
  // Registered, then freed behind the library's back: I/O fails, no crash.
  write_pattern_file(dir_ / "f", 1 << 20, kSeed);
  File f(dir_ / "f", O_RDONLY);
  DeviceMemory mem(1 << 20);
  auto reg = dev.register_memory(mem.data(), mem.size());
  mem.free_now();
  try {
    (void)f.read(reg, 0, 1 << 20, 0);
    ADD_FAILURE() << "read into freed device memory succeeded";
  } catch (const IoError &e) {
    EXPECT_EQ(e.code().value(), EFAULT);
    EXPECT_NE(std::string(e.what()).find("freed while registered"), std::string::npos) << e.what();
  }
}

TEST_F(GpuTest, SecondGpu) {
  std::string why;
  if (cuda_gpus(why) < 2) {
    GTEST_SKIP() << "one GPU here: the multi-GPU test needs two";
  }
  write_pattern_file(dir_ / "f", 8 << 20, kSeed);
  auto dev1 = Device::open(1, Engine::compat);
  CUDA_OK(cudaSetDevice(cuda_ordinal(1)));
  DeviceMemory mem1(8 << 20);
  CUDA_OK(cudaSetDevice(cuda_ordinal(0)));
  DeviceMemory mem0(8 << 20);
  auto reg = dev1.register_memory(mem1.data(), mem1.size());
  File f(dir_ / "f", O_RDONLY);
  ASSERT_EQ(f.read(reg, 1, (8 << 20) - 1, 1), (8U << 20) - 1);
  CUDA_OK(cudaSetDevice(cuda_ordinal(1)));
  EXPECT_EQ(find_mismatch(mem1.to_host(1, (8 << 20) - 1), kSeed, 1), std::nullopt);
  // GPU 0's memory is not device 1's.
  try {
    (void)dev1.register_memory(mem0.data(), mem0.size());
    ADD_FAILURE() << "another GPU's memory registered";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL) << e.what();
  }
}

// The cuFile baseline must agree with the compat engine where cuFile works.
TEST_F(GpuTest, CufileBaselineAgrees) {
  write_pattern_file(dir_ / "f", (8 << 20) + 100, kSeed);
  std::optional<Device> dev;
  try {
    dev.emplace(Device::open(0, Engine::cufile));
  } catch (const std::system_error &e) {
    GTEST_SKIP() << "cuFile unavailable: " << e.what();
  }
  DeviceMemory mem(8 << 20);
  auto reg = dev->register_memory(mem.data(), mem.size());
  File f(dir_ / "f", O_RDONLY);
  std::size_t n = 0;
  try {
    n = f.read(reg, 0, 8 << 20, 100);
  } catch (const IoError &e) {
    // On the H200 we measured on: cuFileHandleRegister fails with 5027 on every file.
    GTEST_SKIP() << "cuFile cannot read this file here: " << e.what();
  }
  ASSERT_EQ(n, 8U << 20);
  EXPECT_EQ(mem.to_host(0, 8 << 20), host_pread(dir_ / "f", 8 << 20, 100));
  // Batch API: four pieces, out of order.
  mem.fill(0);
  std::vector<detail::BatchPiece> pieces;
  for (std::size_t i = 0; i < 4; ++i) {
    pieces.push_back({(3 - i) * (2 << 20), i * (2 << 20), 2 << 20});
  }
  Options options;
  options.engine = Engine::cufile;
  auto state = detail::DeviceState::open(0, options);
  auto mapping = state->register_range(mem.data(), mem.size());
  const auto r = state->backend().native_batch(detail::Direction::read, f.fd(), *mapping, pieces);
  ASSERT_EQ(r.error, 0) << r.detail;
  EXPECT_EQ(r.done, 8U << 20);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(find_mismatch(mem.to_host((3 - i) * (2 << 20), 2 << 20), kSeed, i * (2 << 20)),
              std::nullopt);
  }
}

}  // namespace
}  // namespace phx::test
