// SPDX-License-Identifier: MIT
// The loader's route stage: how each file is read, and why
// (load_stages.hpp).
#include <fcntl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "io/residency.hpp"
#include "safetensors/load_stages.hpp"

namespace phx::safetensors::stage {
namespace {

// The compat stream keeps in flight what the per-file queues of the other
// engines would together: parallel_files x queue_depth requests of
// chunk_size (32 x 32 MiB by default), so that the I/O knobs mean the same
// for every engine.  On the H200's virtio disk this shape and 16 x 16 MiB
// (the Python O_DIRECT ceiling's) measured the same within the disk's
// noise (docs/results.md).  The copy of a slot to the GPU takes a fraction
// of its read, so a quarter more slots than reads in flight keep the reads
// from waiting on a copy.  At most 1 GiB in flight (the default's) or two
// requests, whichever is more: the staging is pinned host memory.
constexpr std::uint64_t kMaxStreamBytes = std::uint64_t{1} << 30;

std::string percent(double fraction) {
  return std::to_string(std::lround(fraction * 100)) + "%";
}

}  // namespace

bool needs_direct_io(const EngineCapabilities &caps) noexcept {
  return caps.device_memory && caps.host_view;
}

// chunk_size is a multiple of the alignment (the Loader checks).
std::size_t stream_request(const LoadOptions &options) {
  return options.chunk_size;
}

unsigned stream_depth(const LoadOptions &options) {
  const std::uint64_t wanted = std::uint64_t{options.queue_depth} * options.parallel_files;
  const std::uint64_t fits = std::max<std::uint64_t>(2, kMaxStreamBytes / options.chunk_size);
  return static_cast<unsigned>(std::min(wanted, fits));
}

std::size_t stream_slots(const LoadOptions &options) {
  return std::size_t{stream_depth(options)} * 5 / 4 + 1;
}

std::uint64_t available(const Segment &s, const FileHeader &header) {
  return std::min(s.file_end, header.file_size) - s.file_begin;
}

ReadDecision open_mode(const LoadOptions &options, const EngineCapabilities &caps,
                       const std::filesystem::path &path, const FileHeader &header) {
  if (needs_direct_io(caps)) {
    return {DirectIo::required, -1,
            "O_DIRECT: the direct engine's mapped device memory takes the NVMe's DMA, never a "
            "CPU copy"};
  }
  switch (options.cache) {
    case CachePolicy::direct:
      return {DirectIo::preferred, -1, "O_DIRECT: cache=direct"};
    case CachePolicy::buffered:
      return {DirectIo::off, -1, "page cache: cache=buffered"};
    case CachePolicy::automatic:
      break;
  }
  const File probe(path, O_RDONLY, 0644, DirectIo::off);
  const double resident =
      phx::detail::resident_fraction(probe.fd(), header.data_offset(), header.file_size);
  // The cache policy's line (File's DirectIo::automatic), for the whole file.
  const std::string line = percent(phx::detail::kResidentForBuffered);
  if (resident >= phx::detail::kResidentForBuffered) {
    return {DirectIo::off, resident,
            "page cache: " + percent(resident) + " of the tensor bytes resident (at least " + line +
                ")"};
  }
  return {DirectIo::preferred, resident,
          "O_DIRECT: " + percent(resident) + " of the tensor bytes resident (under " + line + ")"};
}

ReadRoutes route_reads(const Checkpoint &ckpt, const std::vector<Target> &targets,
                       const LoadOptions &options, const DeviceOf &device) {
  const std::size_t files = ckpt.files.size();
  ReadRoutes routes;
  // One work item per file: its segments share one open descriptor.
  routes.work.resize(files);
  routes.opened.resize(files);
  routes.decisions.resize(files);
  routes.streamed.assign(files, 0);
  for (const Target &t : targets) {
    routes.work[t.segment->file].push_back(&t);
  }
  for (std::size_t f = 0; f < files; ++f) {
    std::vector<const Target *> &work = routes.work[f];
    const bool staged =
        !work.empty() && std::all_of(work.begin(), work.end(), [&](const Target *t) {
          return device(t->segment->device).capabilities().staged;
        });
    if (!staged) {
      continue;
    }
    // A file is read the way the engine of its first segment reads.
    const FileHeader &header = ckpt.files[f];
    const EngineCapabilities caps = device(work.front()->segment->device).capabilities();
    routes.decisions[f] = open_mode(options, caps, header.path, header);
    auto file = std::make_unique<File>(header.path, O_RDONLY, 0644, routes.decisions[f].mode);
    if (!file->direct_io()) {
      routes.opened[f] = std::move(file);  // buffered: its worker reads it through File::read
      continue;
    }
    for (const Target *t : work) {
      routes.streams[t->segment->device].push_back({file.get(), &header, t});
    }
    routes.streamed_files.push_back(std::move(file));
    routes.streamed[f] = 1;
    work.clear();
  }
  return routes;
}

}  // namespace phx::safetensors::stage
