// SPDX-License-Identifier: MIT
// The loader with the compat engine over the fake CUDA driver
// (tests/fakecuda): tensors land in (fake) GPU memory byte for byte, spread
// over two GPUs by a device map, into loader-allocated or caller-supplied
// memory, and the loader's device memory is freed with the last tensor.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fake_gpu.hpp"
#include "phoenix/safetensors.hpp"
#include "safetensors/cold_shape.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"

namespace st = phx::safetensors;
using phx::test::TestTensor;

namespace phx::test {
namespace {

using SafetensorsCompat = FakeGpuTest;

st::LoadOptions compat_options() {
  st::LoadOptions o;
  o.engine = Engine::compat;
  o.chunk_size = 64 << 10;
  return o;
}

// Five shards, odd sizes and a 7-byte gap: every tensor at an unaligned offset.
std::vector<TestTensor> write_sharded(const TempDir &dir) {
  std::vector<TestTensor> all;
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (int f = 0; f < 5; ++f) {
    std::vector<TestTensor> shard;
    for (int t = 0; t < 4; ++t) {
      const std::string name = "layers." + std::to_string(f) + ".w" + std::to_string(t);
      const std::size_t count = 100000 + 3779 * static_cast<std::size_t>(t + f);
      shard.push_back({name, "F16", {count}, tensor_bytes(2 * count, 10 * f + t)});
      weight_map.emplace_back(name, "shard-" + std::to_string(f) + ".safetensors");
    }
    (void)write_safetensors(dir / ("shard-" + std::to_string(f) + ".safetensors"), shard, 7);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  write_index(dir / "model.safetensors.index.json", weight_map);
  return all;
}

void expect_on_gpus(const st::LoadedCheckpoint &loaded, const std::vector<TestTensor> &tensors,
                    const st::DeviceMap &map) {
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (const TestTensor &want : tensors) {
    const st::LoadedTensor &t = loaded.at(want.name);
    EXPECT_EQ(t.memory, st::MemoryKind::cuda) << want.name;
    EXPECT_EQ(t.device, map.device_for(want.name)) << want.name;
    EXPECT_EQ(t.cuda_ordinal, fake_ordinal(t.device)) << want.name;
    std::vector<std::byte> copy(want.data.size());
    st::copy_to_host(t, copy);  // the fake's device memory is not CPU-readable
    EXPECT_EQ(copy, want.data) << want.name;
  }
}

TEST_F(SafetensorsCompat, ShardedCheckpointOnTwoGpusByteForByte) {
  const auto tensors = write_sharded(dir_);
  for (const st::CachePolicy cache : {st::CachePolicy::direct, st::CachePolicy::buffered}) {
    st::LoadOptions o = compat_options();
    o.cache = cache;
    o.parallel_files = 3;
    o.devices = st::DeviceMap::parse("layers.1=1,layers.3=1", 0);
    const auto loaded = st::load(st::open_checkpoint(dir_ / "model.safetensors.index.json"), o);
    expect_on_gpus(*loaded, tensors, o.devices);
    EXPECT_EQ(loaded->stats.files, 5U);
    EXPECT_EQ(loaded->stats.engines.at(0), Engine::compat);
    EXPECT_EQ(loaded->stats.engines.at(1), Engine::compat);
    // O_DIRECT files go through each GPU's stream, buffered ones through File::read.
    EXPECT_EQ(loaded->stats.files_streamed, loaded->stats.files_direct);
    if (cache == st::CachePolicy::buffered) {
      EXPECT_EQ(loaded->stats.files_direct, 0U);
    }
  }
}

// LoadStats::per_file: each file's read mode, path, threads and request
// size, and why: warm files (just written) through the page cache by the
// copy threads, the same files dropped from the page cache O_DIRECT
// by their GPU's reader threads in the cold rule's shape (a loader that
// reads a cold file in another shape than the rule says fails here),
// cache=buffered said as the reason.
TEST_F(SafetensorsCompat, StatsSayHowEachFileWasReadAndWhy) {
  (void)write_sharded(dir_);
  const auto index = dir_ / "model.safetensors.index.json";
  const auto check = [&](const st::LoadedCheckpoint &loaded, bool cold) {
    ASSERT_EQ(loaded.stats.per_file.size(), 5U);
    for (std::size_t f = 0; f < 5; ++f) {
      const st::FileReadStats &fs = loaded.stats.per_file[f];
      SCOPED_TRACE(fs.path.string() + ": " + fs.why);
      EXPECT_EQ(fs.path, loaded.checkpoint.files[f].path);
      EXPECT_GT(fs.bytes, 0U);
      if (!cold) {
        EXPECT_FALSE(fs.direct);
        EXPECT_EQ(fs.path_taken, "engine");
        EXPECT_EQ(fs.threads, Options::defaults().copy_threads);
        EXPECT_EQ(fs.request_bytes, Options::defaults().copy_chunk);
        EXPECT_GE(fs.resident, 0.5);
        EXPECT_NE(fs.why.find("page cache"), std::string::npos);
      } else if (fs.direct) {  // where the file system takes O_DIRECT
        // The cold rule's shape for this file's disk and this machine's
        // cores, whatever the I/O knobs of the other paths say.
        const st::stage::ColdShape rule =
            st::stage::cold_read_shape(st::stage::queue_limits(fs.path), st::stage::usable_cores());
        EXPECT_EQ(fs.path_taken, "readers");
        EXPECT_EQ(fs.request_bytes, rule.request);
        EXPECT_EQ(fs.depth, rule.in_flight);
        EXPECT_EQ(fs.threads, rule.in_flight);
        EXPECT_NE(fs.why.find(rule.why), std::string::npos);
        EXPECT_LT(fs.resident, 0.5);
        EXPECT_NE(fs.why.find("O_DIRECT"), std::string::npos);
      } else {
        EXPECT_NE(fs.why.find("takes no O_DIRECT"), std::string::npos);
      }
    }
  };
  st::LoadOptions o = compat_options();
  check(*st::load(st::open_checkpoint(index), o), false);
  for (const auto &file : st::open_checkpoint(index).files) {
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fdatasync(fd), 0);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ::close(fd);
  }
  check(*st::load(st::open_checkpoint(index), o), true);
  o.cache = st::CachePolicy::buffered;
  const auto forced = st::load(st::open_checkpoint(index), o);
  for (const st::FileReadStats &fs : forced->stats.per_file) {
    EXPECT_FALSE(fs.direct);
    EXPECT_EQ(fs.resident, -1);
    EXPECT_EQ(fs.why, "page cache: cache=buffered");
  }
}

// Larger than many requests of the rule's shape, ending mid-block, by each
// cold reader: the rule's, reader threads and an io_uring stream forced to
// 1 MiB requests, two in flight (the stream over three staging slots, so
// that every slot is taken again while its copy may still run), three
// reader threads of 64 KiB requests, and five reading stripes of them.
TEST_F(SafetensorsCompat, ColdReadersByteForByte) {
  const std::vector<TestTensor> tensors = {
      {"a", "F32", {5000001}, tensor_bytes(20000004, 31)},
      {"b", "U8", {17}, tensor_bytes(17, 32)},
      {"c", "BF16", {9000000}, tensor_bytes(18000000, 33)},
  };
  const auto path = dir_ / "big.safetensors";
  (void)write_safetensors(path, tensors, 3);
  struct Shape {
    st::ColdReader reader;
    std::size_t request;
    unsigned in_flight;
  };
  for (const Shape shape : {Shape{st::ColdReader::automatic, 0, 0},
                            Shape{st::ColdReader::threads, std::size_t{1} << 20, 2},
                            Shape{st::ColdReader::uring, std::size_t{1} << 20, 2},
                            Shape{st::ColdReader::threads, std::size_t{64} << 10, 3},
                            Shape{st::ColdReader::stripes, std::size_t{64} << 10, 5}}) {
    for (const int gpus : {1, 2}) {
      SCOPED_TRACE(testing::Message() << gpus << " GPUs, reader " << static_cast<int>(shape.reader)
                                      << ", " << shape.in_flight << " x " << shape.request);
      st::LoadOptions o = compat_options();
      o.cache = st::CachePolicy::direct;
      o.devices = st::DeviceMap::parse(gpus == 2 ? "c=1" : "", 0);
      o.cold_reader = shape.reader;
      o.cold_request = shape.request;
      o.cold_in_flight = shape.in_flight;
      const auto loaded = st::load(st::open_checkpoint(path), o);
      expect_on_gpus(*loaded, tensors, o.devices);
      if (loaded->stats.files_direct == 0) {
        GTEST_SKIP() << dir_.path() << " has no O_DIRECT: the cold readers never run there";
      }
      EXPECT_EQ(loaded->stats.files_streamed, 1U);
      const st::FileReadStats &fs = loaded->stats.per_file.at(0);
      if (shape.reader != st::ColdReader::automatic) {
        EXPECT_EQ(fs.path_taken, shape.reader == st::ColdReader::uring ? "stream" : "readers");
        EXPECT_EQ(fs.request_bytes, shape.request);
        EXPECT_EQ(fs.depth, shape.in_flight);
        EXPECT_NE(fs.why.find("forced:"), std::string::npos) << fs.why;
      }
    }
  }
}

TEST_F(SafetensorsCompat, StreamedFileCutShortNamesTheFile) {
  const auto tensors = write_sharded(dir_);
  const auto index = dir_ / "model.safetensors.index.json";
  st::Checkpoint checkpoint = st::open_checkpoint(index);
  const auto shard = dir_ / "shard-2.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  st::LoadOptions o = compat_options();
  o.cache = st::CachePolicy::direct;
  try {
    (void)st::load(std::move(checkpoint), o);
    FAIL() << "a load of a file cut short after its header was read succeeded";
  } catch (const std::system_error &e) {
    EXPECT_NE(std::string(e.what()).find(shard.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ended early"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsCompat, CallerSuppliedDeviceMemory) {
  const std::vector<TestTensor> tensors = {{"w", "F32", {25000}, tensor_bytes(100000, 7)},
                                           {"v", "BF16", {11}, tensor_bytes(22, 8)}};
  (void)write_safetensors(dir_ / "m.safetensors", tensors, 9);
  std::vector<std::unique_ptr<FakeDeviceMemory>> memory;
  st::LoadOptions o = compat_options();
  o.allocate = [&](const st::Segment &s) {
    memory.push_back(std::make_unique<FakeDeviceMemory>(s.bytes(), s.device));
    return memory.back()->data();
  };
  const auto loaded = st::load(st::open_checkpoint(dir_ / "m.safetensors"), o);
  expect_on_gpus(*loaded, tensors, o.devices);
  ASSERT_EQ(memory.size(), 1U);
  EXPECT_EQ(loaded->at("w").owner, nullptr);
}

TEST_F(SafetensorsCompat, DeviceMemoryIsFreedWithTheLastTensor) {
  const auto tensors = write_sharded(dir_);
  st::Loader loader(compat_options());
  const st::Checkpoint ckpt = st::open_checkpoint(dir_ / "model.safetensors.index.json");
  loader.warm_up(ckpt);
  const long before = fake_counts().device_allocs;
  {
    const auto loaded = loader.load(ckpt);
    expect_on_gpus(*loaded, tensors, {});
    EXPECT_GT(fake_counts().device_allocs, before);
  }
  EXPECT_EQ(fake_counts().device_allocs, before);
}

}  // namespace
}  // namespace phx::test
