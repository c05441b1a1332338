// SPDX-License-Identifier: MIT
// The shape a compat GPU reads a cold file in: how many synchronous
// O_DIRECT reads at once (reader threads, each its own pinned slots and
// copy stream) and how large each is, from the block device's queue limits
// and the core count (cold_read_shape), unless LoadOptions forces another.
// One pure function, so that the loader and its tests agree on the rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "phoenix/safetensors.hpp"

namespace phx::safetensors::stage {

// What the block layer says about the disk under a file
// (/sys/dev/block/MAJ:MIN, a partition's parent), 0 where unknown.
struct QueueLimits {
  std::string disk;                  // its name ("vda", "nvme0n1"); empty: none found
  std::uint64_t max_sectors_kb = 0;  // largest request the block layer sends
  std::uint64_t max_segments = 0;    // scatter-gather entries per request
  std::uint64_t nr_requests = 0;     // requests each hardware queue holds
  std::uint64_t hw_queues = 0;       // mq/ entries
  std::string unread;                // why the limits of a disk found are 0 ("" if read)
};

// The limits of the disk holding @p path, read under @p sys_root ("/sys"):
// in the queue/ of the device /sys/dev/block/MAJ:MIN resolves to, else in
// block/<its name>/queue (the same directory by the name udev gives it).
[[nodiscard]] QueueLimits queue_limits(const std::filesystem::path &path,
                                       const std::filesystem::path &sys_root = "/sys");

struct ColdShape {
  ColdReader reader = ColdReader::stripes;
  std::size_t request = 0;  // bytes per read
  unsigned in_flight = 0;   // reads at once: threads, or the ring's depth
  std::string why;
};

// Where the device tells nothing: a request the common limits pass whole
// (max_sectors_kb 512 and more, 128 or more segments of 4 KiB pages).
inline constexpr std::size_t kFallbackRequest = std::size_t{512} << 10;
// Bounds of the rule: requests from 64 KiB (smaller cost more in calls than
// the disk gives back) to 4 MiB; at most 64 reader threads (their pinned
// slots: 64 x 2 x 4 MiB at most).
inline constexpr std::size_t kMinRequest = std::size_t{64} << 10;
inline constexpr std::size_t kMaxRequest = std::size_t{4} << 20;
inline constexpr unsigned kMaxInFlight = 64;

// The rule.  Request: the largest power of two the block layer passes as
// one request from scattered 4 KiB pinned pages: at most max_sectors_kb
// and at most max_segments pages, so it is never split; two of them exceed
// one of those limits, so neighbours merge only where their pages happen
// to be physically contiguous.  Reader: threads in stripes, so that no
// two reads in flight are neighbours.  In flight: one read per core (@p cores),
// at least 2 (one reading while another's copy starts), at most half of
// what the hardware queues hold and kMaxInFlight.
[[nodiscard]] ColdShape cold_read_shape(const QueueLimits &limits, unsigned cores);

// The cores this process may run on (its CPU affinity: a container's or
// taskset's share, not the host's count).
[[nodiscard]] unsigned usable_cores() noexcept;

// The rule for @p path and usable_cores(), or what @p options force
// (LoadOptions::cold_*).
[[nodiscard]] ColdShape cold_shape_for(const LoadOptions &options,
                                       const std::filesystem::path &path);

// Staging slots of an io_uring stream of @p shape: a quarter more than it
// has in flight, so that reads do not wait on copies.
[[nodiscard]] std::size_t uring_slots(const ColdShape &shape) noexcept;

[[nodiscard]] const char *reader_name(ColdReader reader) noexcept;

}  // namespace phx::safetensors::stage
