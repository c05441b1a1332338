// SPDX-License-Identifier: MIT
// The cold-read rule (lib/safetensors/cold_shape.hpp): the shape from the
// disk's queue limits and the core count, read from a sysfs tree the test
// builds, and what LoadOptions forces.  The loader's own use of the rule is
// checked against its stats in safetensors_compat_test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "phoenix/safetensors.hpp"
#include "safetensors/cold_shape.hpp"
#include "test_support.hpp"

namespace st = phx::safetensors;
using st::stage::cold_read_shape;
using st::stage::QueueLimits;

namespace phx::test {
namespace {

constexpr std::size_t kKiB = 1024;

TEST(ColdShape, RequestIsTheLargestPowerOfTwoTheQueuePassesWhole) {
  // A virtio disk: 254 segments of 4 KiB pages (1016 KiB) under max_sectors_kb 4096.
  const QueueLimits virtio{"vda", 4096, 254, 256, 1, ""};
  EXPECT_EQ(cold_read_shape(virtio, 16).request, 512 * kKiB);
  // An NVMe drive: max_sectors_kb 128 under 127 segments.
  const QueueLimits nvme{"nvme0n1", 128, 127, 1023, 16, ""};
  EXPECT_EQ(cold_read_shape(nvme, 16).request, 128 * kKiB);
  // Segments no limit, sectors the limit, not a power of two.
  EXPECT_EQ(cold_read_shape({"sda", 1280, 2048, 64, 1, ""}, 8).request, 1024 * kKiB);
  // Clamped to the rule's bounds.
  EXPECT_EQ(cold_read_shape({"x", 32, 8, 64, 1, ""}, 8).request, st::stage::kMinRequest);
  EXPECT_EQ(cold_read_shape({"x", 65536, 65536, 64, 1, ""}, 8).request, st::stage::kMaxRequest);
  // Two requests of the rule's size exceed a limit: from scattered pages
  // the block layer cannot merge them.
  for (const QueueLimits &l : {virtio, nvme}) {
    const std::size_t r = cold_read_shape(l, 4).request;
    EXPECT_GT(2 * r, std::min(l.max_sectors_kb * kKiB, l.max_segments * 4 * kKiB));
  }
}

TEST(ColdShape, InFlightIsOneReadPerCoreWithinTheQueues) {
  const QueueLimits virtio{"vda", 4096, 254, 256, 1, ""};
  EXPECT_EQ(cold_read_shape(virtio, 16).in_flight, 16U);
  EXPECT_EQ(cold_read_shape(virtio, 2).in_flight, 2U);
  EXPECT_EQ(cold_read_shape(virtio, 1).in_flight, 2U);     // at least 2
  EXPECT_EQ(cold_read_shape(virtio, 128).in_flight, 64U);  // at most kMaxInFlight
  // At most half of what the hardware queues hold.
  EXPECT_EQ(cold_read_shape({"sdb", 512, 128, 16, 1, ""}, 32).in_flight, 8U);
  EXPECT_EQ(cold_read_shape({"sdb", 512, 128, 16, 2, ""}, 32).in_flight, 16U);
  EXPECT_EQ(cold_read_shape(virtio, 16).reader, st::ColdReader::stripes);
}

TEST(ColdShape, WithoutLimitsTheFallbackAndTheWhySaysSo) {
  const auto shape = cold_read_shape({}, 4);
  EXPECT_EQ(shape.request, st::stage::kFallbackRequest);
  EXPECT_EQ(shape.in_flight, 4U);
  EXPECT_NE(shape.why.find("no queue limits"), std::string::npos) << shape.why;
  const auto virtio = cold_read_shape({"vda", 4096, 254, 256, 1, ""}, 16);
  EXPECT_NE(virtio.why.find("max_segments 254"), std::string::npos) << virtio.why;
  EXPECT_NE(virtio.why.find("16 cores"), std::string::npos) << virtio.why;
  EXPECT_NE(virtio.why.find("vda"), std::string::npos) << virtio.why;
}

void write_file(const std::filesystem::path &path, const std::string &text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// Points sysfs's /dev/block/MAJ:MIN entry for @p file's device (under
// @p sys) at @p target, as the kernel's symlink does.
void link_device(const std::filesystem::path &sys, const std::filesystem::path &file,
                 const std::filesystem::path &target) {
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  std::filesystem::create_directories(sys / "dev" / "block");
  std::filesystem::create_directory_symlink(
      target, sys / "dev" / "block" /
                  (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev))));
}

// A sysfs tree where the file's device is a partition of a disk with two
// hardware queues: the limits are the disk's.
TEST(ColdShape, QueueLimitsReadFromTheDiskOfAPartition) {
  const TempDir dir;
  const auto file = dir / "model.safetensors";
  write_file(file, "x");
  const auto sys = dir / "sys";
  const auto disk = sys / "devices" / "virtual" / "block" / "vdz";
  write_file(disk / "queue" / "max_sectors_kb", "1024");
  write_file(disk / "queue" / "max_segments", "128");
  write_file(disk / "queue" / "nr_requests", "64");
  std::filesystem::create_directories(disk / "mq" / "0");
  std::filesystem::create_directories(disk / "mq" / "1");
  write_file(disk / "vdz1" / "partition", "1");
  link_device(sys, file, disk / "vdz1");
  const QueueLimits limits = st::stage::queue_limits(file, sys);
  EXPECT_EQ(limits.disk, "vdz");
  EXPECT_EQ(limits.max_sectors_kb, 1024U);
  EXPECT_EQ(limits.max_segments, 128U);
  EXPECT_EQ(limits.nr_requests, 64U);
  EXPECT_EQ(limits.hw_queues, 2U);
  EXPECT_EQ(cold_read_shape(limits, 4).request, 512 * kKiB);
  // No such device under the root: nothing known.
  EXPECT_TRUE(st::stage::queue_limits(file, dir / "empty").disk.empty());
}

// A device whose resolved sysfs directory has no readable limits: they are
// read under block/<name>/ instead, and where neither has them the rule
// says which file it could not read.
TEST(ColdShape, QueueLimitsFallBackToTheDiskByName) {
  const TempDir dir;
  const auto file = dir / "model.safetensors";
  write_file(file, "x");
  const auto sys = dir / "sys";
  const auto device = sys / "devices" / "platform" / "virtio9" / "block" / "vdy";
  std::filesystem::create_directories(device / "queue");
  link_device(sys, file, device);
  QueueLimits limits = st::stage::queue_limits(file, sys);
  EXPECT_EQ(limits.disk, "vdy");
  EXPECT_EQ(limits.max_sectors_kb, 0U);
  EXPECT_NE(limits.unread.find("max_sectors_kb"), std::string::npos) << limits.unread;
  const st::stage::ColdShape unknown = cold_read_shape(limits, 4);
  EXPECT_EQ(unknown.request, st::stage::kFallbackRequest);
  EXPECT_NE(unknown.why.find("no queue limits for this file ("), std::string::npos) << unknown.why;
  EXPECT_NE(unknown.why.find("max_sectors_kb"), std::string::npos) << unknown.why;

  write_file(sys / "block" / "vdy" / "queue" / "max_sectors_kb", "4096");
  write_file(sys / "block" / "vdy" / "queue" / "max_segments", "254");
  write_file(sys / "block" / "vdy" / "queue" / "nr_requests", "256");
  std::filesystem::create_directories(sys / "block" / "vdy" / "mq" / "0");
  limits = st::stage::queue_limits(file, sys);
  EXPECT_EQ(limits.disk, "vdy");
  EXPECT_EQ(limits.max_sectors_kb, 4096U);
  EXPECT_EQ(limits.max_segments, 254U);
  EXPECT_EQ(limits.nr_requests, 256U);
  EXPECT_EQ(limits.hw_queues, 1U);
  const st::stage::ColdShape shape = cold_read_shape(limits, 16);
  EXPECT_EQ(shape.request, 512 * kKiB);
  EXPECT_NE(shape.why.find("max_segments 254"), std::string::npos) << shape.why;
}

TEST(ColdShape, OptionsForceEachPartOfTheShape) {
  const TempDir dir;
  const auto file = dir / "m.safetensors";
  write_file(file, "x");
  st::LoadOptions o;
  const auto rule = st::stage::cold_shape_for(o, file);
  EXPECT_EQ(rule.why.rfind("rule: ", 0), 0U) << rule.why;
  o.cold_reader = st::ColdReader::uring;
  o.cold_request = 32 * kKiB * kKiB;
  o.cold_in_flight = 32;
  const auto forced = st::stage::cold_shape_for(o, file);
  EXPECT_EQ(forced.reader, st::ColdReader::uring);
  EXPECT_EQ(forced.request, 32 * kKiB * kKiB);
  EXPECT_EQ(forced.in_flight, 32U);
  EXPECT_NE(forced.why.find("forced: reader=uring cold_request=32768 KiB cold_in_flight=32"),
            std::string::npos)
      << forced.why;
  EXPECT_EQ(st::stage::uring_slots(forced), 41U);
}

}  // namespace
}  // namespace phx::test
