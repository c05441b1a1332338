// SPDX-License-Identifier: MIT
// The cold-read rule (cold_shape.hpp).  On the virtio disks measured (one
// hardware queue, max_sectors_kb 4096, 254 segments) the block layer cut
// every 1 MiB read of scattered pages in two (1016 KiB + 8 KiB) and merged
// neighbouring reads of physically contiguous pages into fewer, larger
// ones; the fastest reader there (16 threads of 512 KiB into pinned
// memory) kept many unsplit, unmerged reads in flight.  The rule asks the
// queue for the largest size that is never split, has each thread read
// its own stripe so that no two reads in flight are neighbours the block
// layer could merge, and takes one read per core: a synchronous read's
// thread sleeps in the disk's queue, wakes on its own core to start its
// copy, and more threads than cores only queue behind each other.
#include "safetensors/cold_shape.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <system_error>
#include <thread>

#include "safetensors/unique_fd.hpp"

namespace phx::safetensors::stage {
namespace {

constexpr std::uint64_t kPage = 4096;

// A sysfs number; 0 where it could not be read or parsed, and then the
// first such failure (the file and errno) in @p error.
std::uint64_t read_number(const std::filesystem::path &file, std::string &error) {
  const detail::UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (error.empty()) {
      error = file.string() + ": " + std::generic_category().message(errno);
    }
    return 0;
  }
  char text[64];
  const ssize_t n = ::read(fd.get(), text, sizeof(text) - 1);
  if (n <= 0) {
    if (error.empty()) {
      error = file.string() + ": " + (n < 0 ? std::generic_category().message(errno) : "empty");
    }
    return 0;
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text, text + n, value);
  if (ec != std::errc{} || end == text) {
    if (error.empty()) {
      error = file.string() + ": not a number";
    }
    return 0;
  }
  return value;
}

// The limits in @p queue; false (and @p limits.unread set) where neither
// request-size limit could be read.
bool read_queue(const std::filesystem::path &queue, QueueLimits &limits) {
  std::string error;
  limits.max_sectors_kb = read_number(queue / "max_sectors_kb", error);
  limits.max_segments = read_number(queue / "max_segments", error);
  limits.nr_requests = read_number(queue / "nr_requests", error);
  limits.unread = error;
  return limits.max_sectors_kb != 0 || limits.max_segments != 0;
}

std::string kib(std::size_t bytes) {
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

QueueLimits queue_limits(const std::filesystem::path &path, const std::filesystem::path &sys_root) {
  QueueLimits limits;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return limits;
  }
  const std::filesystem::path dev =
      sys_root / "dev" / "block" /
      (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)));
  std::error_code ec;
  std::filesystem::path disk = std::filesystem::canonical(dev, ec);
  if (ec) {
    return limits;  // no block device (tmpfs, overlay, network file systems)
  }
  if (std::filesystem::exists(disk / "partition", ec)) {
    disk = disk.parent_path();
  }
  limits.disk = disk.filename().string();
  if (!read_queue(disk / "queue", limits)) {
    QueueLimits by_name;
    by_name.disk = limits.disk;
    if (read_queue(sys_root / "block" / limits.disk / "queue", by_name)) {
      limits = by_name;
      disk = sys_root / "block" / limits.disk;
    }
  }
  std::uint64_t queues = 0;
  for (const auto &entry : std::filesystem::directory_iterator(disk / "mq", ec)) {
    queues += entry.is_directory(ec) ? 1 : 0;
  }
  limits.hw_queues = queues;
  return limits;
}

ColdShape cold_read_shape(const QueueLimits &limits, unsigned cores) {
  ColdShape shape;
  shape.reader = ColdReader::stripes;
  // Request size.
  std::uint64_t whole = 0;  // the largest request that goes down whole
  std::string from;
  if (limits.max_sectors_kb != 0) {
    whole = limits.max_sectors_kb << 10;
    from = "max_sectors_kb " + std::to_string(limits.max_sectors_kb);
  }
  if (limits.max_segments != 0 && (whole == 0 || limits.max_segments * kPage < whole)) {
    whole = limits.max_segments * kPage;
    from = "max_segments " + std::to_string(limits.max_segments) + " x 4 KiB pages";
  }
  if (whole == 0) {
    shape.request = kFallbackRequest;
    from =
        "no queue limits for this file" + (limits.unread.empty() ? "" : " (" + limits.unread + ")");
  } else {
    shape.request = static_cast<std::size_t>(
        std::clamp<std::uint64_t>(std::bit_floor(whole), kMinRequest, kMaxRequest));
  }
  // Reads in flight.
  const unsigned per_core = std::max(cores, 2U);
  std::uint64_t room = kMaxInFlight;
  std::string bound = "at most " + std::to_string(kMaxInFlight);
  if (limits.nr_requests != 0) {
    const std::uint64_t half =
        limits.nr_requests * std::max<std::uint64_t>(limits.hw_queues, 1) / 2;
    if (half < room) {
      room = std::max<std::uint64_t>(half, 1);
      bound = "at most half of " + std::to_string(limits.hw_queues) + " hardware queue(s) x " +
              std::to_string(limits.nr_requests) + " requests";
    }
  }
  shape.in_flight = static_cast<unsigned>(std::min<std::uint64_t>(per_core, room));
  shape.why = "rule: " + std::to_string(shape.in_flight) + " reader threads in stripes (" +
              std::to_string(cores) + " cores, at least 2, " + bound + ") x " + kib(shape.request) +
              " (" + (whole == 0 ? from : "largest power of two within " + from) +
              (limits.disk.empty() ? "" : " of " + limits.disk) + ")";
  return shape;
}

unsigned usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) {
      return static_cast<unsigned>(n);
    }
  }
  return std::max(std::thread::hardware_concurrency(), 1U);
}

ColdShape cold_shape_for(const LoadOptions &options, const std::filesystem::path &path) {
  ColdShape shape = cold_read_shape(queue_limits(path), usable_cores());
  std::string forced;
  if (options.cold_reader != ColdReader::automatic) {
    shape.reader = options.cold_reader;
    forced += std::string(" reader=") + reader_name(options.cold_reader);
  }
  if (options.cold_request != 0) {
    shape.request = options.cold_request;
    forced += " cold_request=" + kib(options.cold_request);
  }
  if (options.cold_in_flight != 0) {
    shape.in_flight = options.cold_in_flight;
    forced += " cold_in_flight=" + std::to_string(options.cold_in_flight);
  }
  if (!forced.empty()) {
    shape.why = "forced:" + forced + " (the " + shape.why + ")";
  }
  return shape;
}

std::size_t uring_slots(const ColdShape &shape) noexcept {
  return std::size_t{shape.in_flight} * 5 / 4 + 1;
}

const char *reader_name(ColdReader reader) noexcept {
  switch (reader) {
    case ColdReader::automatic:
      return "automatic";
    case ColdReader::threads:
      return "threads";
    case ColdReader::stripes:
      return "stripes";
    case ColdReader::uring:
      return "uring";
  }
  return "?";
}

}  // namespace phx::safetensors::stage
