// SPDX-License-Identifier: MIT
// The loader's stages one at a time (lib/safetensors/load_stages.hpp), with
// the host engine: prepare, route, account and the tensors' places; the
// read stage is what safetensors_loader_test exercises end to end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "phoenix/safetensors.hpp"
#include "safetensors/load_stages.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"

namespace st = phx::safetensors;
namespace stage = phx::safetensors::stage;
using phx::test::TestTensor;

namespace {

// Two shards, the second with an unaligned tensor, and an index.
class LoadStages : public ::testing::Test {
 protected:
  void SetUp() override {
    shard0 = {{"a", "F32", {1000}, phx::test::tensor_bytes(4000, 1)},
              {"b", "I8", {77}, phx::test::tensor_bytes(77, 2)}};
    shard1 = {{"c", "BF16", {5000}, phx::test::tensor_bytes(10000, 3)}};
    (void)phx::test::write_safetensors(dir / "s0.safetensors", shard0);
    (void)phx::test::write_safetensors(dir / "s1.safetensors", shard1, 13);
    phx::test::write_index(
        dir / "model.safetensors.index.json",
        {{"a", "s0.safetensors"}, {"b", "s0.safetensors"}, {"c", "s1.safetensors"}});
    options.engine = phx::Engine::host;
    options.chunk_size = 64 << 10;
    options.queue_depth = 3;
  }

  stage::DeviceOf device_of() {
    return [this](int id) -> phx::Device & {
      auto it = devices.find(id);
      if (it == devices.end()) {
        it = devices.emplace(id, phx::Device::open(id, options.engine)).first;
      }
      return it->second;
    };
  }

  const phx::test::TempDir dir;
  std::vector<TestTensor> shard0, shard1;
  st::LoadOptions options;
  std::map<int, phx::Device> devices;
};

// The bytes of @p path from @p offset, @p size of them.
std::vector<std::byte> file_bytes(const std::filesystem::path &path, std::uint64_t offset,
                                  std::size_t size) {
  std::vector<std::byte> bytes(size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  const ssize_t n = ::pread(fd, bytes.data(), size, static_cast<off_t>(offset));
  ::close(fd);
  EXPECT_EQ(n, static_cast<ssize_t>(size));
  return bytes;
}

}  // namespace

TEST_F(LoadStages, PrepareGivesEachSegmentRegisteredMemoryOfItsSize) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  const std::vector<stage::Target> targets =
      stage::prepare_targets(ckpt, plan, options, device_of());
  ASSERT_EQ(targets.size(), plan.segments.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const stage::Target &t = targets[i];
    EXPECT_EQ(t.segment, &plan.segments[i]);
    EXPECT_EQ(t.memory, st::MemoryKind::host);
    EXPECT_EQ(t.ordinal, -1);
    ASSERT_NE(t.owner, nullptr);
    EXPECT_EQ(t.base, t.owner->data());
    EXPECT_GE(t.owner->size(), t.segment->bytes());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.base) % options.alignment, 0U);
    // The host engine's registrations are the memory itself.
    EXPECT_EQ(t.registration.host_view(), t.base);
  }
}

TEST_F(LoadStages, PrepareNamesTheFileWhenTheCallersAllocatorGivesNothing) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  options.allocate = [](const st::Segment &) -> void * { return nullptr; };
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  try {
    (void)stage::prepare_targets(ckpt, plan, options, device_of());
    FAIL() << "no error";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
    const std::string first = ckpt.files[plan.segments.front().file].path.string();
    EXPECT_NE(std::string(e.what()).find(first), std::string::npos) << e.what();
  }
}

TEST_F(LoadStages, RouteLeavesHostFilesToWorkersThatDecideThemselves) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  const std::vector<stage::Target> targets =
      stage::prepare_targets(ckpt, plan, options, device_of());
  const stage::ReadRoutes routes = stage::route_reads(ckpt, targets, options, device_of());
  ASSERT_EQ(routes.work.size(), 2U);
  EXPECT_TRUE(routes.streams.empty());
  EXPECT_TRUE(routes.streamed_files.empty());
  std::size_t routed = 0;
  for (std::size_t f = 0; f < 2; ++f) {
    EXPECT_EQ(routes.streamed[f], 0);
    EXPECT_EQ(routes.opened[f], nullptr);
    EXPECT_TRUE(routes.decisions[f].why.empty()) << "decided before its worker opened it";
    for (const stage::Target *t : routes.work[f]) {
      EXPECT_EQ(t->segment->file, f);
      ++routed;
    }
  }
  EXPECT_EQ(routed, targets.size());
}

TEST_F(LoadStages, OpenModeFollowsTheCachePolicy) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "s0.safetensors");
  const st::FileHeader &header = ckpt.files.front();
  const phx::EngineCapabilities caps = device_of()(0).capabilities();

  options.cache = st::CachePolicy::buffered;
  stage::ReadDecision d = stage::open_mode(options, caps, header.path, header);
  EXPECT_EQ(d.mode, phx::DirectIo::off);
  EXPECT_EQ(d.resident, -1);
  EXPECT_EQ(d.why, "page cache: cache=buffered");

  options.cache = st::CachePolicy::direct;
  d = stage::open_mode(options, caps, header.path, header);
  EXPECT_EQ(d.mode, phx::DirectIo::preferred);
  EXPECT_EQ(d.why, "O_DIRECT: cache=direct");

  // Just written, so in the page cache: read through it, and say so.
  options.cache = st::CachePolicy::automatic;
  d = stage::open_mode(options, caps, header.path, header);
  EXPECT_EQ(d.mode, phx::DirectIo::off) << d.why;
  EXPECT_DOUBLE_EQ(d.resident, 1.0);
  EXPECT_EQ(d.why.rfind("page cache: 100% of the tensor bytes resident", 0), 0U) << d.why;
}

TEST_F(LoadStages, AccountSaysWhatEachFileGot) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  const std::vector<stage::Target> targets =
      stage::prepare_targets(ckpt, plan, options, device_of());
  stage::ReadRoutes routes = stage::route_reads(ckpt, targets, options, device_of());
  // What the workers would have decided.
  routes.decisions[0] = {phx::DirectIo::off, 1.0, "page cache: test"};
  routes.decisions[1] = {phx::DirectIo::preferred, 0.0, "O_DIRECT: test"};
  const std::vector<st::FileReadStats> stats =
      stage::account_files(ckpt, targets, routes, options, device_of());
  ASSERT_EQ(stats.size(), 2U);
  for (std::size_t f = 0; f < 2; ++f) {
    const st::FileReadStats &s = stats[f];
    EXPECT_EQ(s.path, ckpt.files[f].path);
    // The tensors' bytes, not the aligned segments' (4096 and 12288).
    EXPECT_EQ(s.bytes, f == 0 ? 4000U + 77U : 10000U);
    EXPECT_EQ(s.path_taken, "queue");
    EXPECT_EQ(s.threads, 1U);
    EXPECT_EQ(s.request_bytes, options.chunk_size);
    EXPECT_EQ(s.depth, options.queue_depth);
    EXPECT_EQ(s.why, routes.decisions[f].why);
    EXPECT_EQ(s.resident, routes.decisions[f].resident);
  }
  EXPECT_FALSE(stats[0].direct);
  EXPECT_TRUE(stats[1].direct);
}

TEST_F(LoadStages, AccountSaysAFileNoTensorWasAskedOfWasNotRead) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  std::vector<stage::Target> targets = stage::prepare_targets(ckpt, plan, options, device_of());
  std::erase_if(targets, [](const stage::Target &t) { return t.segment->file == 1; });
  const stage::ReadRoutes routes = stage::route_reads(ckpt, targets, options, device_of());
  const std::vector<st::FileReadStats> stats =
      stage::account_files(ckpt, targets, routes, options, device_of());
  ASSERT_EQ(stats.size(), 2U);
  EXPECT_EQ(stats[1].bytes, 0U);
  EXPECT_FALSE(stats[1].direct);
  EXPECT_EQ(stats[1].why, "not read: none of its tensors were asked for");
  EXPECT_TRUE(stats[1].path_taken.empty());
  EXPECT_EQ(stats[0].path_taken, "queue");
}

TEST_F(LoadStages, EachTensorPointsAtItsBytesInItsSegment) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  const std::vector<stage::Target> targets =
      stage::prepare_targets(ckpt, plan, options, device_of());
  // The read stage's work, done here by hand: each segment's file range.
  for (const stage::Target &t : targets) {
    const st::FileHeader &header = ckpt.files[t.segment->file];
    const std::uint64_t avail = stage::available(*t.segment, header);
    const std::vector<std::byte> bytes =
        file_bytes(header.path, t.segment->file_begin, static_cast<std::size_t>(avail));
    std::memcpy(t.base, bytes.data(), bytes.size());
  }
  const std::vector<st::LoadedTensor> tensors = stage::loaded_tensors(ckpt, targets);
  std::map<std::string, std::vector<std::byte>> expected;
  for (const TestTensor &t : shard0) {
    expected.emplace(t.name, t.data);
  }
  for (const TestTensor &t : shard1) {
    expected.emplace(t.name, t.data);
  }
  ASSERT_EQ(tensors.size(), expected.size());
  for (const st::LoadedTensor &t : tensors) {
    const std::vector<std::byte> &want = expected.at(t.info->name);
    ASSERT_EQ(t.info->size(), want.size()) << t.info->name;
    EXPECT_EQ(t.memory, st::MemoryKind::host);
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << t.info->name;
    EXPECT_NE(t.owner, nullptr);
  }
}

TEST_F(LoadStages, AvailableStopsAtTheEndOfTheFile) {
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "s1.safetensors");
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  ASSERT_EQ(plan.segments.size(), 1U);
  const st::Segment &s = plan.segments.front();
  const st::FileHeader &header = ckpt.files.front();
  // The aligned end passes the file's end; what exists is up to it.
  EXPECT_GT(s.file_end, header.file_size);
  EXPECT_EQ(stage::available(s, header), header.file_size - s.file_begin);
}
