// SPDX-License-Identifier: MIT
// The loader with the host engine: every tensor byte for byte as written,
// whatever the offsets, shards, cache policy or destination memory.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <thread>

#include "phoenix/config.h"
#include "phoenix/safetensors.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"
#if PHX_WITH_CUDA
#include "cuda/driver_api.hpp"
#endif

namespace st = phx::safetensors;
using phx::test::TestTensor;

namespace {

st::LoadOptions host_options() {
  st::LoadOptions o;
  o.engine = phx::Engine::host;
  o.chunk_size = 64 << 10;  // several requests per file even for small tensors
  return o;
}

// Checks that @p loaded holds exactly @p expected (name -> bytes).
void expect_tensors(const st::LoadedCheckpoint &loaded,
                    const std::map<std::string, std::vector<std::byte>> &expected) {
  ASSERT_EQ(loaded.tensors.size(), expected.size());
  for (const auto &[name, bytes] : expected) {
    const st::LoadedTensor &t = loaded.at(name);
    EXPECT_EQ(t.memory, st::MemoryKind::host);
    ASSERT_EQ(t.info->size(), bytes.size()) << name;
    if (!bytes.empty()) {  // an empty vector's data() may be null: memcmp's UB
      EXPECT_EQ(std::memcmp(t.data, bytes.data(), bytes.size()), 0) << name;
    }
    std::vector<std::byte> copy(bytes.size());
    st::copy_to_host(t, copy);
    EXPECT_EQ(copy, bytes) << name;
  }
}

std::map<std::string, std::vector<std::byte>> by_name(const std::vector<TestTensor> &tensors) {
  std::map<std::string, std::vector<std::byte>> m;
  for (const TestTensor &t : tensors) {
    m.emplace(t.name, t.data);
  }
  return m;
}

}  // namespace

TEST(SafetensorsLoader, UnalignedOffsetsLoadByteForByte) {
  const phx::test::TempDir dir;
  // Sizes and a 13-byte gap put every tensor at an odd offset, some across
  // chunk and page boundaries, one larger than a chunk.
  const std::vector<TestTensor> tensors = {
      {"embed", "BF16", {300, 7}, phx::test::tensor_bytes(4200, 1)},
      {"w1", "F32", {33333}, phx::test::tensor_bytes(133332, 2)},
      {"b1", "I8", {3}, phx::test::tensor_bytes(3, 3)},
      {"empty", "F16", {0}, {}},
      {"w2", "F64", {1001}, phx::test::tensor_bytes(8008, 4)},
  };
  const auto path = dir / "m.safetensors";
  (void)phx::test::write_safetensors(path, tensors, 13);
  for (const st::CachePolicy cache :
       {st::CachePolicy::direct, st::CachePolicy::buffered, st::CachePolicy::automatic}) {
    st::LoadOptions o = host_options();
    o.cache = cache;
    const auto loaded = st::load(st::open_checkpoint(path), o);
    expect_tensors(*loaded, by_name(tensors));
    EXPECT_EQ(loaded->stats.files, 1U);
    EXPECT_EQ(loaded->stats.engines.at(0), phx::Engine::host);
    EXPECT_GE(loaded->stats.bytes_read, loaded->stats.tensor_bytes);
    if (cache == st::CachePolicy::buffered) {
      EXPECT_EQ(loaded->stats.files_direct, 0U);
    }
  }
}

TEST(SafetensorsLoader, ShardedIndexAndSeveralFilesConcurrently) {
  const phx::test::TempDir dir;
  std::vector<TestTensor> all;
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (int f = 0; f < 5; ++f) {
    std::vector<TestTensor> shard;
    for (int t = 0; t < 4; ++t) {
      const std::string name = "layers." + std::to_string(f) + ".w" + std::to_string(t);
      shard.push_back({name,
                       "F16",
                       {std::uint64_t(1000 + 37 * t)},
                       phx::test::tensor_bytes(std::size_t{2} * (1000 + 37 * t), 10 * f + t)});
      weight_map.emplace_back(name, "shard-" + std::to_string(f) + ".safetensors");
    }
    (void)phx::test::write_safetensors(dir / ("shard-" + std::to_string(f) + ".safetensors"), shard,
                                       5);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  phx::test::write_index(dir / "model.safetensors.index.json", weight_map);
  st::LoadOptions o = host_options();
  o.parallel_files = 3;
  std::uint64_t last_done = 0;
  std::uint64_t last_total = 0;
  o.progress = [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  const auto loaded = st::load(st::open_checkpoint(dir / "model.safetensors.index.json"), o);
  expect_tensors(*loaded, by_name(all));
  EXPECT_EQ(loaded->stats.files, 5U);
  EXPECT_EQ(last_done, loaded->stats.bytes_read);
  EXPECT_GE(last_total, last_done);
}

TEST(SafetensorsLoader, DeviceMapSplitsFilesIntoSegments) {
  const phx::test::TempDir dir;
  const std::vector<TestTensor> tensors = {
      {"a.x", "U8", {5000}, phx::test::tensor_bytes(5000, 1)},
      {"b.x", "U8", {7000}, phx::test::tensor_bytes(7000, 2)},
      {"a.y", "U8", {9000}, phx::test::tensor_bytes(9000, 3)},
  };
  (void)phx::test::write_safetensors(dir / "m.safetensors", tensors, 1);
  st::LoadOptions o = host_options();
  o.devices = st::DeviceMap::parse("b=1", 0);
  const auto loaded = st::load(st::open_checkpoint(dir / "m.safetensors"), o);
  expect_tensors(*loaded, by_name(tensors));
  EXPECT_EQ(loaded->stats.segments, 2U);
  EXPECT_EQ(loaded->at("b.x").device, 1);
  EXPECT_EQ(loaded->at("a.y").device, 0);
  EXPECT_NE(loaded->at("b.x").owner, loaded->at("a.x").owner);
}

TEST(SafetensorsLoader, CallerSuppliedMemory) {
  const phx::test::TempDir dir;
  const std::vector<TestTensor> tensors = {
      {"w", "F32", {2500}, phx::test::tensor_bytes(10000, 7)},
      {"v", "F32", {11}, phx::test::tensor_bytes(44, 8)},
  };
  (void)phx::test::write_safetensors(dir / "m.safetensors", tensors, 9);
  std::vector<std::unique_ptr<phx::test::AlignedBuffer>> buffers;
  st::LoadOptions o = host_options();
  o.allocate = [&](const st::Segment &s) {
    buffers.push_back(std::make_unique<phx::test::AlignedBuffer>(s.bytes()));
    return static_cast<void *>(buffers.back()->data());
  };
  const auto loaded = st::load(st::open_checkpoint(dir / "m.safetensors"), o);
  expect_tensors(*loaded, by_name(tensors));
  ASSERT_EQ(buffers.size(), 1U);
  const st::LoadedTensor &w = loaded->at("w");
  EXPECT_EQ(w.owner, nullptr);
  EXPECT_GE(w.data, buffers[0]->data());
  EXPECT_LT(w.data, buffers[0]->data() + buffers[0]->size());

  o.allocate = [](const st::Segment &) -> void * { return nullptr; };
  try {
    (void)st::load(st::open_checkpoint(dir / "m.safetensors"), o);
    ADD_FAILURE() << "a null destination was accepted";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
  }
}

TEST(SafetensorsLoader, LoaderKeepsDevicesAcrossLoadsAndWarmsUp) {
  const phx::test::TempDir dir;
  const std::vector<TestTensor> tensors = {{"w", "U8", {777}, phx::test::tensor_bytes(777, 5)}};
  (void)phx::test::write_safetensors(dir / "m.safetensors", tensors);
  st::Loader loader(host_options());
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "m.safetensors");
  loader.warm_up(ckpt);
  EXPECT_EQ(loader.device(0).registration_count(), 0U);
  const auto first = loader.load(ckpt);
  const auto second = loader.load(ckpt);
  expect_tensors(*first, by_name(tensors));
  expect_tensors(*second, by_name(tensors));
  EXPECT_NE(first->at("w").data, second->at("w").data);
}

// Pinned host memory on a thread with no CUDA context current (the host
// engine makes none): the ceiling phx-load --pinned measures.
TEST(SafetensorsLoader, PinnedHostLoadNeedsNoCurrentContext) {
  const phx::test::TempDir dir;
  const std::vector<TestTensor> tensors = {{"a", "U8", {5000}, phx::test::tensor_bytes(5000, 7)},
                                           {"b", "F32", {64, 3}, phx::test::tensor_bytes(768, 8)}};
  (void)phx::test::write_safetensors(dir / "m.safetensors", tensors);
  st::LoadOptions o = host_options();
  o.pinned_host = true;
  bool have_cuda = false;
#if PHX_WITH_CUDA
  have_cuda = phx::detail::cuda::driver() != nullptr;
#endif
  std::thread fresh([&] {
    try {
      st::Loader loader(o);
      const auto loaded = loader.load(st::open_checkpoint(dir / "m.safetensors"));
      EXPECT_TRUE(have_cuda) << "pinned memory without a CUDA driver";
      expect_tensors(*loaded, by_name(tensors));
    } catch (const std::system_error &e) {
      EXPECT_FALSE(have_cuda) << e.what();
      EXPECT_TRUE(e.code().value() == ENODEV || e.code().value() == ENOTSUP) << e.what();
    }
  });
  fresh.join();
}

TEST(SafetensorsLoader, FileShrunkAfterOpeningIsAnError) {
  const phx::test::TempDir dir;
  const std::vector<TestTensor> tensors = {
      {"w", "U8", {100000}, phx::test::tensor_bytes(100000, 5)}};
  const auto path = dir / "m.safetensors";
  (void)phx::test::write_safetensors(path, tensors);
  st::Checkpoint ckpt = st::open_checkpoint(path);
  std::filesystem::resize_file(path, 50000);
  try {
    (void)st::load(std::move(ckpt), host_options());
    ADD_FAILURE() << "a truncated file loaded";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EIO) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(SafetensorsLoader, BadOptionsAreEinval) {
  st::LoadOptions o = host_options();
  o.chunk_size = 1000;
  try {
    st::Loader loader(o);
    ADD_FAILURE() << "unaligned chunk accepted";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL);
  }
}
