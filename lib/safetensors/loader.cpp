// SPDX-License-Identifier: MIT
// Loader::load runs the stages of load_stages.hpp in order; this file holds
// the read stage.  Where the registration has a host view (direct, host),
// each file is read by its own worker (several files at once) through an
// io_uring queue of large aligned requests.  On a compat GPU, the files
// opened with O_DIRECT by one cold reader per GPU in the cold shape
// (cold_shape.hpp): reader threads, or one io_uring stream, into pinned
// staging, each slot copied to the GPU as it lands; the other files through
// File::read and the engine's own pipeline (compat, cufile).
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "gather/gather_mover.hpp"
#include "phoenix/safetensors.hpp"
#include "safetensors/load_stages.hpp"

namespace phx::safetensors {
namespace {

using Clock = std::chrono::steady_clock;
using stage::available;
using stage::ColdShape;
using stage::ReadDecision;
using stage::ReadRoutes;
using stage::Streamed;
using stage::Target;

// compat/cufile pipeline one File::read internally; a piece this size keeps
// the progress counter moving without starving that pipeline.
constexpr std::size_t kEnginePiece = std::size_t{256} << 20;
// Pieces of one file in flight at once.  A single synchronous piece drains
// the engine's pipeline at its end (16 chunks over 12 copy threads leave
// most of them idle for the second half), which cost a two-file checkpoint
// a third of its warm bandwidth on the H200.
constexpr unsigned kEnginePiecesInFlight = 3;
// Bounds of a forced cold shape (LoadOptions::cold_*).
constexpr std::size_t kMaxColdRequest = std::size_t{1} << 30;
constexpr unsigned kMaxColdInFlight = 1024;

struct SharedState {
  std::atomic<std::uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> files_direct{0};
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::size_t finished = 0;
  std::exception_ptr error;
};

// Bytes to request for the segment: what the file has of it, rounded up to
// the alignment (O_DIRECT lengths) but not past the segment.
std::uint64_t request_span(const Segment &s, const FileHeader &header, const LoadOptions &options) {
  const std::uint64_t avail = available(s, header);
  return std::min<std::uint64_t>(
      (avail + options.alignment - 1) / options.alignment * options.alignment, s.bytes());
}

void read_with_queue(File &file, const Target &target, const FileHeader &header,
                     const LoadOptions &options, SharedState &shared) {
  const Segment &s = *target.segment;
  const std::uint64_t avail = available(s, header);
  const std::uint64_t span = request_span(s, header, options);
  std::vector<IoRequest> requests;
  for (std::uint64_t off = 0; off < span; off += options.chunk_size) {
    const auto size =
        static_cast<std::size_t>(std::min<std::uint64_t>(options.chunk_size, span - off));
    requests.push_back(
        IoRequest::read(file, target.registration, off, size, s.file_begin + off, off));
  }
  IoQueue queue(options.queue_depth);
  queue.submit(requests);
  while (queue.outstanding() > 0) {
    for (const IoCompletion &c : queue.wait(1)) {
      const std::uint64_t off = c.user_data;
      const std::uint64_t expected = std::min<std::uint64_t>(
          std::min<std::uint64_t>(options.chunk_size, span - off), avail - off);
      if (c.error != 0) {
        detail::throw_io(c.error, "load", header.path, s.file_begin + off,
                         static_cast<std::size_t>(expected), c.bytes);
      }
      if (c.bytes < expected) {
        detail::throw_io(EIO, "load", header.path, s.file_begin + off,
                         static_cast<std::size_t>(expected), c.bytes,
                         "the file ended early (changed while loading?)");
      }
      shared.done += expected;
    }
    if (shared.stop) {
      return;  // the queue's destructor waits for what is in flight
    }
  }
}

void read_with_engine(File &file, const Target &target, const FileHeader &header,
                      SharedState &shared) {
  const Segment &s = *target.segment;
  const std::uint64_t avail = available(s, header);
  std::atomic<std::uint64_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const auto reader = [&]() noexcept {
    try {
      for (std::uint64_t off = next.fetch_add(kEnginePiece); off < avail && !shared.stop;
           off = next.fetch_add(kEnginePiece)) {
        const auto size =
            static_cast<std::size_t>(std::min<std::uint64_t>(kEnginePiece, avail - off));
        const std::size_t n = file.read(target.registration, off, size, s.file_begin + off);
        if (n < size) {
          detail::throw_io(EIO, "load", header.path, s.file_begin + off, size, n,
                           "the file ended early (changed while loading?)");
        }
        shared.done += size;
      }
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) {
        failure = std::current_exception();
      }
      next = avail;  // the other readers stop after their piece
    }
  };
  const auto pieces = (avail + kEnginePiece - 1) / kEnginePiece;
  const auto helpers = static_cast<unsigned>(
      std::min<std::uint64_t>(kEnginePiecesInFlight, std::max<std::uint64_t>(pieces, 1)) - 1);
  {
    std::vector<std::jthread> more;
    more.reserve(helpers);
    for (unsigned i = 0; i < helpers; ++i) {
      more.emplace_back(reader);
    }
    reader();
  }  // joined: no reader outlives the file or the target
  if (failure) {
    std::rethrow_exception(failure);
  }
}

// One move of every request: the readers never drain between files or
// segments.  The requests of all files in the segments' order, which the
// readers take in stripes or from one cursor (ColdReader); the disk sees
// the shape's reads at once.  The mover counts bytes into
// shared.done as they land.
void read_streamed(detail::GatherMover &mover, std::span<const Streamed> segments,
                   const ColdShape &shape, const LoadOptions &options, SharedState &shared) {
  const std::size_t request = shape.request;
  std::vector<detail::PlannedRequest> requests;
  std::vector<const Streamed *> owner;
  for (const Streamed &st : segments) {
    const Segment &s = *st.target->segment;
    const std::uint64_t span = request_span(s, *st.header, options);
    for (std::uint64_t off = 0; off < span; off += request) {
      detail::PlannedRequest r;
      r.file = st.file;
      r.registration = &st.target->registration;
      r.reg_offset = static_cast<std::size_t>(off);
      r.file_offset = s.file_begin + off;
      r.size = static_cast<std::size_t>(std::min<std::uint64_t>(request, span - off));
      r.count = 1;
      requests.push_back(r);
      owner.push_back(&st);
    }
  }
  std::vector<detail::RequestOutcome> outcomes(requests.size());
  mover.count_reads_into(&shared.done);
  try {
    mover.move(detail::Direction::read, requests, outcomes);
  } catch (...) {
    mover.count_reads_into(nullptr);
    throw;
  }
  mover.count_reads_into(nullptr);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const detail::PlannedRequest &r = requests[i];
    const Streamed &st = *owner[i];
    const std::uint64_t avail = available(*st.target->segment, *st.header);
    const std::uint64_t off = r.reg_offset;
    const auto expected = static_cast<std::size_t>(std::min<std::uint64_t>(r.size, avail - off));
    const detail::RequestOutcome &o = outcomes[i];
    if (o.error != 0) {
      detail::throw_io(o.error, "load", st.header->path, r.file_offset, expected, o.bytes);
    }
    if (o.bytes < expected) {
      detail::throw_io(EIO, "load", st.header->path, r.file_offset, expected, o.bytes,
                       "the file ended early (changed while loading?)");
    }
  }
}

// @p opened: the file as the stream pass opened it (and found buffered), or
// null to open it here.
// @p decision: filled when the file is opened here.
void read_file(const FileHeader &header, std::span<const Target *const> targets,
               const EngineCapabilities &caps, std::unique_ptr<File> opened,
               const LoadOptions &options, SharedState &shared, ReadDecision &decision) {
  if (opened == nullptr) {
    decision = stage::open_mode(options, caps, header.path, header);
    opened = std::make_unique<File>(header.path, O_RDONLY, 0644, decision.mode);
  }
  File &file = *opened;
  if (file.direct_io()) {
    ++shared.files_direct;
  } else if (decision.mode != DirectIo::off) {
    decision.mode = DirectIo::off;
    decision.why += "; the file system takes no O_DIRECT: page cache";
  }
  for (const Target *target : targets) {
    if (shared.stop) {
      return;
    }
    if (target->registration.host_view() != nullptr) {
      read_with_queue(file, *target, header, options, shared);
    } else {
      read_with_engine(file, *target, header, shared);
    }
  }
}

// What the read stage did.
struct ReadOutcome {
  std::uint64_t bytes_read = 0;  // what the reads counted: aligned ends stop at EOF
  std::size_t files_direct = 0;
  std::vector<int> failed_streams;  // devices whose stream may hold reads: made anew
  std::exception_ptr error;         // the first failure; the other reads stopped
};

// The streams (one thread per GPU) and parallel_files workers taking the
// other files in order, progress reported every 100 ms until all are done.
ReadOutcome read_all(const Checkpoint &ckpt, const LoadPlan &plan, ReadRoutes &routes,
                     const std::map<int, detail::GatherMover *> &movers, const LoadOptions &options,
                     const stage::DeviceOf &device) {
  SharedState shared;
  shared.files_direct += routes.streamed_files.size();
  const auto caps_of = [&](std::size_t f) {
    return device(routes.work[f].front()->segment->device).capabilities();
  };
  std::vector<char> stream_failed(routes.streams.size(), 0);
  const auto files_left = static_cast<std::size_t>(
      std::count_if(routes.work.begin(), routes.work.end(),
                    [](const std::vector<const Target *> &w) { return !w.empty(); }));
  std::atomic<std::size_t> next{0};
  const std::size_t workers = std::min<std::size_t>(options.parallel_files, files_left);
  const std::size_t threads_total = workers + routes.streams.size();
  const auto record_failure = [&shared] {
    const std::lock_guard lock(shared.mutex);
    if (!shared.error) {
      shared.error = std::current_exception();
    }
    shared.stop = true;
  };
  const auto finish = [&shared] {
    const std::lock_guard lock(shared.mutex);
    ++shared.finished;
    shared.finished_cv.notify_all();
  };
  const auto streamer = [&](std::size_t index, detail::GatherMover *mover,
                            const std::vector<Streamed> *segments, const ColdShape *shape) {
    try {
      read_streamed(*mover, *segments, *shape, options, shared);
    } catch (...) {
      stream_failed[index] = 1;
      record_failure();
    }
    finish();
  };
  const auto worker = [&] {
    for (std::size_t f = next++; f < routes.work.size() && !shared.stop; f = next++) {
      if (routes.work[f].empty()) {
        continue;
      }
      try {
        read_file(ckpt.files[f], routes.work[f], caps_of(f), std::move(routes.opened[f]), options,
                  shared, routes.decisions[f]);
      } catch (...) {
        record_failure();
      }
    }
    finish();
  };
  std::uint64_t total = 0;  // what the reads will count: the aligned ends stop at EOF
  for (const Segment &s : plan.segments) {
    total += available(s, ckpt.files[s.file]);
  }
  {
    std::vector<std::jthread> threads;
    threads.reserve(threads_total);
    std::size_t m = 0;
    for (const auto &entry : routes.streams) {
      threads.emplace_back(streamer, m++, movers.at(entry.first), &entry.second,
                           &routes.shapes.at(entry.first));
    }
    for (std::size_t i = 0; i < workers; ++i) {
      threads.emplace_back(worker);
    }
    for (;;) {
      std::unique_lock lock(shared.mutex);
      const bool all = shared.finished_cv.wait_for(
          lock, std::chrono::milliseconds(100), [&] { return shared.finished == threads_total; });
      lock.unlock();
      if (options.progress) {
        options.progress(shared.done.load(), total);
      }
      if (all) {
        break;
      }
    }
  }  // joined
  ReadOutcome outcome;
  std::size_t k = 0;
  for (const auto &entry : routes.streams) {
    if (stream_failed[k++] != 0) {
      outcome.failed_streams.push_back(entry.first);
    }
  }
  outcome.bytes_read = shared.done.load();
  outcome.files_direct = shared.files_direct.load();
  outcome.error = shared.error;
  return outcome;
}

void check_options(const LoadOptions &o) {
  const auto bad = [](const std::string &what) {
    detail::throw_errno(EINVAL, "load options: " + what);
  };
  if (o.alignment == 0 || (o.alignment & (o.alignment - 1)) != 0) {
    bad("alignment " + std::to_string(o.alignment) + " is not a power of two");
  }
  if (o.chunk_size == 0 || o.chunk_size % o.alignment != 0) {
    bad("chunk size " + std::to_string(o.chunk_size) + " is not a multiple of the alignment " +
        std::to_string(o.alignment));
  }
  if (o.queue_depth == 0 || o.parallel_files == 0) {
    bad("queue depth and parallel files must be at least 1");
  }
  if (o.cold_request % o.alignment != 0 || o.cold_request > kMaxColdRequest) {
    bad("cold request " + std::to_string(o.cold_request) +
        " is not a multiple of the alignment up to 1 GiB");
  }
  if (o.cold_in_flight > kMaxColdInFlight) {
    bad("cold in flight " + std::to_string(o.cold_in_flight) + " is over " +
        std::to_string(kMaxColdInFlight));
  }
}

}  // namespace

const LoadedTensor &LoadedCheckpoint::at(std::string_view name) const {
  for (const LoadedTensor &t : tensors) {
    if (t.info->name == name) {
      return t;
    }
  }
  detail::throw_errno(ENOENT, "no tensor \"" + std::string(name) + "\" in the checkpoint");
}

Loader::Loader(LoadOptions options) : options_(std::move(options)) {
  check_options(options_);
}
Loader::Loader(Loader &&) noexcept = default;
Loader &Loader::operator=(Loader &&) noexcept = default;
Loader::~Loader() = default;

Device &Loader::device(int device) {
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    it = devices_.emplace(device, Device::open(device, options_.engine)).first;
  }
  return it->second;
}

detail::GatherMover &Loader::stream(int device, ColdReader reader, std::size_t request,
                                    unsigned in_flight) {
  const std::string key = std::string(stage::reader_name(reader)) + " " +
                          std::to_string(in_flight) + " x " + std::to_string(request);
  auto it = streams_.find(device);
  if (it != streams_.end() && stream_shapes_[device] == key) {
    return *it->second;
  }
  if (it != streams_.end()) {
    streams_.erase(it);  // made for another shape: its staging goes first
  }
  std::unique_ptr<detail::GatherMover> mover =
      reader == ColdReader::uring
          ? detail::make_staged_mover(device, in_flight, request,
                                      stage::uring_slots({reader, request, in_flight, {}}))
          : detail::make_reader_threads_mover(device, in_flight, request,
                                              reader == ColdReader::stripes);
  stream_shapes_[device] = key;
  return *streams_.emplace(device, std::move(mover)).first->second;
}

void Loader::warm_up(const Checkpoint &checkpoint) {
  if (checkpoint.files.empty()) {
    return;
  }
  const FileHeader &first = checkpoint.files.front();
  for (const Segment &s : plan_load(checkpoint, options_).segments) {
    Device &dev = device(s.device);
    const std::size_t size = options_.alignment;
    const std::shared_ptr<Allocation> memory =
        stage::memory_of(dev.capabilities()) == MemoryKind::host
            ? (options_.pinned_host ? allocate_pinned(size) : allocate_host(size, size))
            : allocate_cuda(s.device, size);
    const Registration reg = dev.register_memory(memory->data(), size);
    File file(
        first.path, O_RDONLY, 0644,
        stage::needs_direct_io(dev.capabilities()) ? DirectIo::required : DirectIo::preferred);
    (void)file.read(reg, 0, size, 0);
    if (dev.capabilities().staged && options_.cache != CachePolicy::buffered) {
      const ColdShape shape = stage::cold_shape_for(options_, first.path);
      (void)stream(s.device, shape.reader, shape.request, shape.in_flight);  // slow to allocate
    }
  }
}

std::shared_ptr<LoadedCheckpoint> Loader::load(Checkpoint checkpoint) {
  auto result = std::make_shared<LoadedCheckpoint>();
  result->checkpoint = std::move(checkpoint);
  const Checkpoint &ckpt = result->checkpoint;
  const stage::DeviceOf device_of = [this](int id) -> Device & { return device(id); };
  const LoadPlan plan = plan_load(ckpt, options_);
  for (const Segment &s : plan.segments) {
    (void)device(s.device);
  }

  const Clock::time_point start = Clock::now();
  const std::vector<Target> targets = stage::prepare_targets(ckpt, plan, options_, device_of);
  const Clock::time_point allocated = Clock::now();
  ReadRoutes routes = stage::route_reads(ckpt, targets, options_, device_of);
  std::map<int, detail::GatherMover *> movers;
  for (const auto &entry : routes.streams) {
    const ColdShape &shape = routes.shapes.at(entry.first);
    movers.emplace(entry.first, &stream(entry.first, shape.reader, shape.request, shape.in_flight));
  }
  ReadOutcome outcome = read_all(ckpt, plan, routes, movers, options_, device_of);
  for (const int failed : outcome.failed_streams) {
    streams_.erase(failed);
  }
  if (outcome.error) {
    std::rethrow_exception(outcome.error);
  }

  LoadStats &stats = result->stats;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.allocate_seconds = std::chrono::duration<double>(allocated - start).count();
  stats.bytes_read = outcome.bytes_read;
  stats.tensor_bytes = ckpt.tensor_bytes();
  stats.files = ckpt.files.size();
  stats.files_direct = outcome.files_direct;
  stats.files_streamed = routes.streamed_files.size();
  stats.segments = plan.segments.size();
  for (auto &[id, dev] : devices_) {
    stats.engines.emplace(id, dev.engine());
  }
  stats.per_file = stage::account_files(ckpt, targets, routes, options_, device_of);
  result->tensors = stage::loaded_tensors(ckpt, targets);
  // Registrations end here; the memory stays with the tensors.
  return result;
}

std::shared_ptr<LoadedCheckpoint> load(Checkpoint checkpoint, const LoadOptions &options) {
  Loader loader(options);
  return loader.load(std::move(checkpoint));
}

}  // namespace phx::safetensors
