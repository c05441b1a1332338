// SPDX-License-Identifier: MIT
// Checkpoints: single files, folders, sharded indexes, device maps and plans.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "phoenix/safetensors.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"

namespace st = phx::safetensors;
using phx::test::TestTensor;

namespace {

template <typename Fn>
void expect_errno(Fn &&fn, int err, const std::string &word) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), err) << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

TestTensor tensor(const std::string &name, std::size_t bytes, std::uint64_t seed) {
  return {name, "U8", {bytes}, phx::test::tensor_bytes(bytes, seed)};
}

// Two shards and their index in @p dir.
void write_sharded(const phx::test::TempDir &dir) {
  (void)phx::test::write_safetensors(dir / "model-00001-of-00002.safetensors",
                                     {tensor("a", 100, 1), tensor("b", 50, 2)});
  (void)phx::test::write_safetensors(dir / "model-00002-of-00002.safetensors",
                                     {tensor("c", 70, 3)});
  phx::test::write_index(dir / "model.safetensors.index.json",
                         {{"a", "model-00001-of-00002.safetensors"},
                          {"b", "model-00001-of-00002.safetensors"},
                          {"c", "model-00002-of-00002.safetensors"}});
}

}  // namespace

TEST(SafetensorsCheckpoint, IndexNamesEachShardOnce) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  const auto files = st::checkpoint_files(dir / "model.safetensors.index.json");
  ASSERT_EQ(files.size(), 2U);
  EXPECT_EQ(files[0].filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(files[1].filename(), "model-00002-of-00002.safetensors");
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "model.safetensors.index.json");
  EXPECT_EQ(ckpt.tensor_count(), 3U);
  EXPECT_EQ(ckpt.tensor_bytes(), 220U);
}

TEST(SafetensorsCheckpoint, SelectKeepsTheNamedTensorsAndTheirFiles) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  const std::vector<std::string> c_only{"c"};
  const st::Checkpoint c = st::select_tensors(st::open_checkpoint(dir.path()), c_only);
  ASSERT_EQ(c.files.size(), 1U);
  EXPECT_EQ(c.files[0].path.filename(), "model-00002-of-00002.safetensors");
  ASSERT_EQ(c.tensor_count(), 1U);
  EXPECT_EQ(c.files[0].tensors[0].name, "c");
  const std::vector<std::string> a_and_c{"c", "a"};
  const st::Checkpoint ac = st::select_tensors(st::open_checkpoint(dir.path()), a_and_c);
  EXPECT_EQ(ac.files.size(), 2U);
  EXPECT_EQ(ac.tensor_count(), 2U);
  const std::vector<std::string> unknown{"a", "nope"};
  expect_errno([&] { (void)st::select_tensors(st::open_checkpoint(dir.path()), unknown); }, EINVAL,
               "\"nope\" is in no file");
}

TEST(SafetensorsCheckpoint, FolderUsesItsIndex) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  // A stray file the index does not name stays out.
  (void)phx::test::write_safetensors(dir / "stray.safetensors", {tensor("x", 8, 9)});
  const st::Checkpoint ckpt = st::open_checkpoint(dir.path());
  EXPECT_EQ(ckpt.files.size(), 2U);
  EXPECT_EQ(ckpt.tensor_count(), 3U);
}

TEST(SafetensorsCheckpoint, FolderWithoutIndexTakesEveryFileInNameOrder) {
  const phx::test::TempDir dir;
  (void)phx::test::write_safetensors(dir / "b.safetensors", {tensor("y", 8, 1)});
  (void)phx::test::write_safetensors(dir / "a.safetensors", {tensor("x", 8, 2)});
  const auto files = st::checkpoint_files(dir.path());
  ASSERT_EQ(files.size(), 2U);
  EXPECT_EQ(files[0].filename(), "a.safetensors");
  EXPECT_EQ(files[1].filename(), "b.safetensors");
}

TEST(SafetensorsCheckpoint, TensorInTwoFilesIsRejected) {
  const phx::test::TempDir dir;
  (void)phx::test::write_safetensors(dir / "a.safetensors", {tensor("w", 8, 1)});
  (void)phx::test::write_safetensors(dir / "b.safetensors", {tensor("w", 8, 2)});
  expect_errno([&] { (void)st::open_checkpoint(dir.path()); }, EINVAL, "\"w\" is in both");
}

TEST(SafetensorsCheckpoint, IndexNamingAMissingTensorIsRejected) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  phx::test::write_index(
      dir / "model.safetensors.index.json",
      {{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00001-of-00002.safetensors"}});
  expect_errno([&] { (void)st::open_checkpoint(dir / "model.safetensors.index.json"); }, EINVAL,
               "\"c\"");
}

namespace {

// Every way of naming one sharded checkpoint, so that each is checked alike.
std::vector<std::vector<std::filesystem::path>> ways_to_name(const phx::test::TempDir &dir) {
  const auto index = dir / "model.safetensors.index.json";
  return {{index}, {dir.path()}, {index, dir.path()}, {dir.path(), index}};
}

}  // namespace

TEST(SafetensorsCheckpoint, AnIndexIsHeldToItsWordHoweverTheCheckpointIsNamed) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  const auto index = dir / "model.safetensors.index.json";
  struct Case {
    std::vector<std::pair<std::string, std::string>> weight_map;
    std::string word;
  };
  const std::string one = "model-00001-of-00002.safetensors";
  const std::string two = "model-00002-of-00002.safetensors";
  const std::vector<Case> cases = {
      // A tensor no shard has.
      {{{"a", one}, {"b", one}, {"c", two}, {"ghost", two}}, "\"ghost\""},
      // The wrong shard for a tensor.
      {{{"a", one}, {"b", two}, {"c", two}}, "\"b\" in"},
      // A shard's tensor the index leaves out.
      {{{"a", one}, {"c", two}}, "\"b\", which the weight_map does not name"},
  };
  for (const Case &c : cases) {
    phx::test::write_index(index, c.weight_map);
    for (const auto &paths : ways_to_name(dir)) {
      SCOPED_TRACE(paths.front().string() + " (" + std::to_string(paths.size()) + " paths)");
      expect_errno([&] { (void)st::open_checkpoint(paths); }, EINVAL, c.word);
    }
  }
  write_sharded(dir);
  for (const auto &paths : ways_to_name(dir)) {
    EXPECT_EQ(st::open_checkpoint(paths).tensor_count(), 3U);
  }
}

TEST(SafetensorsCheckpoint, AJsonFileNamedExplicitlyIsAnIndex) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  const auto renamed = dir / "weights.json";
  std::filesystem::rename(dir / "model.safetensors.index.json", renamed);
  EXPECT_EQ(st::checkpoint_files(renamed).size(), 2U);
  EXPECT_EQ(st::open_checkpoint(renamed).tensor_count(), 3U);
  phx::test::write_index(renamed, {{"a", "model-00002-of-00002.safetensors"}});
  expect_errno([&] { (void)st::open_checkpoint(renamed); }, EINVAL, "\"a\" in");
}

TEST(SafetensorsCheckpoint, BadIndexes) {
  const phx::test::TempDir dir;
  const auto index = dir / "model.safetensors.index.json";
  phx::test::write_index(index, {{"a", "../elsewhere.safetensors"}});
  expect_errno([&] { (void)st::checkpoint_files(index); }, EINVAL, "not a file name");
  phx::test::write_index(index, {});
  expect_errno([&] { (void)st::checkpoint_files(index); }, EINVAL, "empty weight_map");
  expect_errno([&] { (void)st::checkpoint_files(dir / "nothing"); }, ENOENT, "nothing");
}

TEST(SafetensorsCheckpoint, IndexMappingATensorTwiceIsRejected) {
  const phx::test::TempDir dir;
  write_sharded(dir);
  // Which shard "a" comes from would depend on the JSON parser.
  phx::test::write_index(dir / "model.safetensors.index.json",
                         {{"a", "model-00001-of-00002.safetensors"},
                          {"b", "model-00001-of-00002.safetensors"},
                          {"c", "model-00002-of-00002.safetensors"},
                          {"a", "model-00002-of-00002.safetensors"}});
  expect_errno([&] { (void)st::open_checkpoint(dir.path()); }, EINVAL, "\"a\" twice");
}

TEST(SafetensorsCheckpoint, DeviceMapLongestPrefixOnNameBoundaries) {
  const st::DeviceMap map = st::DeviceMap::parse("model.layers.1=1,model.layers.10=2,lm_head=3", 0);
  EXPECT_EQ(map.device_for("model.layers.1.mlp.weight"), 1);
  EXPECT_EQ(map.device_for("model.layers.10.mlp.weight"), 2);
  EXPECT_EQ(map.device_for("model.layers.11.mlp.weight"), 0);
  EXPECT_EQ(map.device_for("lm_head"), 3);
  EXPECT_EQ(map.device_for("lm_headx"), 0);
  EXPECT_EQ(st::DeviceMap::parse("5", 0).device_for("anything"), 5);
  expect_errno([] { (void)st::DeviceMap::parse("a=b", 0); }, EINVAL, "\"b\"");
  expect_errno([] { (void)st::DeviceMap::parse("a=-1", 0); }, EINVAL, "\"-1\"");
}

TEST(SafetensorsCheckpoint, PlanCoversTensorsWithAlignedSegments) {
  const phx::test::TempDir dir;
  (void)phx::test::write_safetensors(
      dir / "m.safetensors", {tensor("x.a", 5000, 1), tensor("y.b", 3000, 2), tensor("x.c", 10, 3)},
      7);
  const st::Checkpoint ckpt = st::open_checkpoint(dir / "m.safetensors");
  st::LoadOptions options;
  options.devices = st::DeviceMap::parse("y=1", 0);
  const st::LoadPlan plan = st::plan_load(ckpt, options);
  ASSERT_EQ(plan.segments.size(), 2U);
  const st::FileHeader &file = ckpt.files[0];
  for (const st::Segment &s : plan.segments) {
    EXPECT_EQ(s.file_begin % 4096, 0U);
    EXPECT_EQ(s.file_end % 4096, 0U);
    for (const std::size_t i : s.tensors) {
      const st::TensorInfo &t = file.tensors[i];
      EXPECT_EQ(options.devices.device_for(t.name), s.device);
      EXPECT_LE(s.file_begin, file.data_offset() + t.begin);
      EXPECT_GE(s.file_end, file.data_offset() + t.end);
    }
  }
  EXPECT_EQ(plan.segments[0].tensors.size() + plan.segments[1].tensors.size(), 3U);
  options.alignment = 3000;
  expect_errno([&] { (void)st::plan_load(ckpt, options); }, EINVAL, "power of two");
}
