// SPDX-License-Identifier: MIT
// The stages of Loader::load, in the order it runs them:
//   plan     plan_load (plan.cpp): the checkpoint's tensors as aligned
//            segments, one allocation each;
//   prepare  prepare_targets: each segment's memory allocated (or the
//            caller's) and registered with its device;
//   route    route_reads: how each file is read, and why: its GPU's cold
//            reader in the cold shape (a compat GPU, O_DIRECT), or a worker that reads it through
//            an io_uring queue (memory with a host view) or the engine's File::read; O_DIRECT or
//            the page cache by the cache policy;
//   read     loader.cpp: the streams and workers run, errors and progress
//            gathered;
//   account  account_files and loaded_tensors: what each file got (for
//            LoadStats::per_file) and where each tensor landed.
// Each stage takes what the ones before produced and nothing else, so that
// each can be tested on its own (tests/unit/safetensors/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "phoenix/safetensors.hpp"
#include "safetensors/cold_shape.hpp"

namespace phx::safetensors::stage {

// Opens (once) and returns a Phoenix device: the Loader's device().
using DeviceOf = std::function<Device &(int)>;

// A segment's destination.
struct Target {
  const Segment *segment = nullptr;
  std::shared_ptr<Allocation> owner;  // null for the caller's memory
  std::byte *base = nullptr;
  Registration registration;
  MemoryKind memory = MemoryKind::host;
  int ordinal = -1;  // CUDA's, for cuda memory
};

// How a file is opened, and why (FileReadStats::why).
struct ReadDecision {
  DirectIo mode = DirectIo::preferred;
  double resident = -1;
  std::string why;
};

// A segment read by its GPU's stream, with the file it comes from.
struct Streamed {
  File *file = nullptr;
  const FileHeader *header = nullptr;
  const Target *target = nullptr;
};

// Where each file's bytes go and how; indexed by Checkpoint::files.
struct ReadRoutes {
  // The targets a worker reads from each file; empty for a file its GPU's
  // stream reads, or none of whose tensors were asked for.
  std::vector<std::vector<const Target *>> work;
  // A file the routing opened and found buffered, for its worker; null
  // where the worker opens it (and decides) itself.
  std::vector<std::unique_ptr<File>> opened;
  std::vector<ReadDecision> decisions;           // here for staged files, else by the worker
  std::vector<char> streamed;                    // nonzero: its GPU's stream reads it
  std::map<int, std::vector<Streamed>> streams;  // by device, in file order
  // The shape of each device's cold reads: the rule's (or the forced one)
  // for its first streamed file.
  std::map<int, ColdShape> shapes;
  std::vector<std::unique_ptr<File>> streamed_files;
};

// Device memory behind a host view (the direct engine's mapped pages)
// takes no buffered copy.
[[nodiscard]] bool needs_direct_io(const EngineCapabilities &caps) noexcept;

// Memory kind an engine's registrations take.
[[nodiscard]] MemoryKind memory_of(const EngineCapabilities &caps) noexcept;

// Bytes of the segment that exist in the file (the aligned end may pass EOF).
[[nodiscard]] std::uint64_t available(const Segment &s, const FileHeader &header);

// How @p path is opened under @p options for a device with @p caps: the
// direct engine's mapped memory always O_DIRECT; else by the cache policy,
// which looks at how much of the file's tensor bytes the page cache holds.
[[nodiscard]] ReadDecision open_mode(const LoadOptions &options, const EngineCapabilities &caps,
                                     const std::filesystem::path &path, const FileHeader &header);

// One target per segment of @p plan, allocated (LoadOptions::allocate or
// the device's kind of memory) and registered.  Throws ENOMEM naming the
// file when the caller's allocator returns null.
[[nodiscard]] std::vector<Target> prepare_targets(const Checkpoint &ckpt, const LoadPlan &plan,
                                                  const LoadOptions &options,
                                                  const DeviceOf &device);

// How each file is read.  A file all of whose targets are on compat GPUs
// (staged) is decided here: opened with O_DIRECT, its GPU's cold reader
// reads it in the shape cold_shape_for gives its GPU's first such file;
// opened buffered, it goes to a worker with the file already open.
// The other files go to workers, which decide when they open them.
[[nodiscard]] ReadRoutes route_reads(const Checkpoint &ckpt, const std::vector<Target> &targets,
                                     const LoadOptions &options, const DeviceOf &device);

// What each file got: read mode, path, threads, request size, depth and
// why, from the routes and the decisions the workers filled in.
[[nodiscard]] std::vector<FileReadStats> account_files(const Checkpoint &ckpt,
                                                       const std::vector<Target> &targets,
                                                       const ReadRoutes &routes,
                                                       const LoadOptions &options,
                                                       const DeviceOf &device);

// Every loaded tensor where it landed, in the targets' order.
[[nodiscard]] std::vector<LoadedTensor> loaded_tensors(const Checkpoint &ckpt,
                                                       const std::vector<Target> &targets);

}  // namespace phx::safetensors::stage
