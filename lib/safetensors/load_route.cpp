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

std::string percent(double fraction) {
  return std::to_string(std::lround(fraction * 100)) + "%";
}

}  // namespace

bool needs_direct_io(const EngineCapabilities &caps) noexcept {
  return caps.device_memory && caps.host_view;
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
      const int dev = t->segment->device;
      if (routes.shapes.find(dev) == routes.shapes.end()) {
        routes.shapes.emplace(dev, cold_shape_for(options, header.path));
      }
      routes.streams[dev].push_back({file.get(), &header, t});
    }
    routes.streamed_files.push_back(std::move(file));
    routes.streamed[f] = 1;
    work.clear();
  }
  return routes;
}

}  // namespace phx::safetensors::stage
