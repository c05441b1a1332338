// SPDX-License-Identifier: MIT
// Loading a planned checkpoint: one allocation and one registration per
// segment, then the files read with large aligned requests.  Where the
// registration has a host view (direct, host), each file by its own worker
// (several files at once) through an io_uring queue.  On a compat GPU, the
// files opened with O_DIRECT in one stream per GPU: io_uring into pinned
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
#include "io/residency.hpp"
#include "phoenix/safetensors.hpp"

namespace phx::safetensors {
namespace {

using Clock = std::chrono::steady_clock;

// compat/cufile pipeline one File::read internally; a piece this size keeps
// the progress counter moving without starving that pipeline.
constexpr std::size_t kEnginePiece = std::size_t{256} << 20;
// Pieces of one file in flight at once.  A single synchronous piece drains
// the engine's pipeline at its end (16 chunks over 12 copy threads leave
// most of them idle for the second half), which cost a two-file checkpoint
// a third of its warm bandwidth on the H200.
constexpr unsigned kEnginePiecesInFlight = 3;
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

struct Target {
  const Segment *segment = nullptr;
  std::shared_ptr<Allocation> owner;
  std::byte *base = nullptr;
  Registration registration;
  MemoryKind memory = MemoryKind::host;
  int ordinal = -1;
};

// A segment read by its GPU's stream, with the file it comes from.
struct Streamed {
  File *file = nullptr;
  const FileHeader *header = nullptr;
  const Target *target = nullptr;
};

struct SharedState {
  std::atomic<std::uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> files_direct{0};
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::size_t finished = 0;
  std::exception_ptr error;
};

MemoryKind memory_of(const EngineCapabilities &caps) noexcept {
  return caps.device_memory ? MemoryKind::cuda : MemoryKind::host;
}

// Device memory behind a host view (the direct engine's mapped pages)
// takes no buffered copy.
bool needs_direct_io(const EngineCapabilities &caps) noexcept {
  return caps.device_memory && caps.host_view;
}

// How a file is opened, and why (LoadStats::per_file).
struct ReadDecision {
  DirectIo mode = DirectIo::preferred;
  double resident = -1;
  std::string why;
};

std::string percent(double fraction) {
  return std::to_string(std::lround(fraction * 100)) + "%";
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
      detail::resident_fraction(probe.fd(), header.data_offset(), header.file_size);
  // The cache policy's line (File's DirectIo::automatic), for the whole file.
  const std::string line = percent(detail::kResidentForBuffered);
  if (resident >= detail::kResidentForBuffered) {
    return {DirectIo::off, resident,
            "page cache: " + percent(resident) + " of the tensor bytes resident (at least " + line +
                ")"};
  }
  return {DirectIo::preferred, resident,
          "O_DIRECT: " + percent(resident) + " of the tensor bytes resident (under " + line + ")"};
}

// Bytes of the segment that exist in the file (the aligned end may pass EOF).
std::uint64_t available(const Segment &s, const FileHeader &header) {
  return std::min(s.file_end, header.file_size) - s.file_begin;
}

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

// chunk_size is a multiple of the alignment (check_options).
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

// One move of every request: one long queue never drains between files or
// segments.  Files one after another, in the segments' order: the depth
// already spans parallel_files files' worth of requests (stream_depth), and
// spreading requests over four files at once measured 0.97x one file on a
// virtio disk (docs/results.md).  The mover counts bytes into shared.done as
// they land.
void read_streamed(detail::GatherMover &mover, std::span<const Streamed> segments,
                   const LoadOptions &options, SharedState &shared) {
  const std::size_t request = stream_request(options);
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
    decision = open_mode(options, caps, header.path, header);
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

detail::GatherMover &Loader::stream(int device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    it = streams_
             .emplace(device,
                      detail::make_staged_mover(device, stream_depth(options_),
                                                stream_request(options_), stream_slots(options_)))
             .first;
  }
  return *it->second;
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
        memory_of(dev.capabilities()) == MemoryKind::host
            ? (options_.pinned_host ? allocate_pinned(size) : allocate_host(size, size))
            : allocate_cuda(s.device, size);
    const Registration reg = dev.register_memory(memory->data(), size);
    File file(first.path, O_RDONLY, 0644,
              needs_direct_io(dev.capabilities()) ? DirectIo::required : DirectIo::preferred);
    (void)file.read(reg, 0, size, 0);
    if (dev.capabilities().staged && options_.cache != CachePolicy::buffered) {
      (void)stream(s.device);  // its pinned staging is slow to allocate
    }
  }
}

std::shared_ptr<LoadedCheckpoint> Loader::load(Checkpoint checkpoint) {
  auto result = std::make_shared<LoadedCheckpoint>();
  result->checkpoint = std::move(checkpoint);
  const Checkpoint &ckpt = result->checkpoint;
  const LoadPlan plan = plan_load(ckpt, options_);
  for (const Segment &s : plan.segments) {
    (void)device(s.device);
  }

  const Clock::time_point start = Clock::now();
  std::vector<Target> targets(plan.segments.size());
  for (std::size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment &s = plan.segments[i];
    Device &dev = device(s.device);
    Target &t = targets[i];
    t.segment = &s;
    t.memory = memory_of(dev.capabilities());
    if (options_.allocate) {
      t.base = static_cast<std::byte *>(options_.allocate(s));
      if (t.base == nullptr) {
        detail::throw_errno(ENOMEM, ckpt.files[s.file].path.string() +
                                        ": the caller's allocator returned no memory for " +
                                        std::to_string(s.bytes()) + " bytes");
      }
    } else {
      t.owner = t.memory == MemoryKind::host
                    ? (options_.pinned_host ? allocate_pinned(s.bytes())
                                            : allocate_host(s.bytes(), options_.alignment))
                    : allocate_cuda(s.device, s.bytes());
      t.base = t.owner->data();
    }
    t.ordinal = t.memory == MemoryKind::cuda ? cuda_ordinal(s.device) : -1;
    t.registration = dev.register_memory(t.base, s.bytes());
  }

  const Clock::time_point allocated = Clock::now();
  // One work item per file: its segments share one open descriptor.
  std::vector<std::vector<const Target *>> work(ckpt.files.size());
  for (const Target &t : targets) {
    work[t.segment->file].push_back(&t);
  }
  SharedState shared;
  // A file is read the way the engine of its first segment reads.
  std::vector<FileReadStats> per_file(ckpt.files.size());
  for (std::size_t f = 0; f < ckpt.files.size(); ++f) {
    per_file[f].path = ckpt.files[f].path;
    for (const Target *t : work[f]) {
      per_file[f].bytes += t->segment->bytes();
    }
  }
  const auto caps_of = [&](std::size_t f) {
    return device(work[f].front()->segment->device).capabilities();
  };
  // Files a compat GPU takes whole, opened with O_DIRECT: its stream's.
  std::vector<std::unique_ptr<File>> streamed_files;
  std::vector<std::unique_ptr<File>> opened(ckpt.files.size());  // buffered: for their worker
  std::vector<ReadDecision> decisions(ckpt.files.size());
  std::vector<char> streamed(ckpt.files.size(), 0);
  std::map<int, std::vector<Streamed>> streams;
  {
    for (std::size_t f = 0; f < work.size(); ++f) {
      const bool staged =
          !work[f].empty() && std::all_of(work[f].begin(), work[f].end(), [&](const Target *t) {
            return device(t->segment->device).capabilities().staged;
          });
      if (!staged) {
        continue;
      }
      const FileHeader &header = ckpt.files[f];
      decisions[f] = open_mode(options_, caps_of(f), header.path, header);
      auto file = std::make_unique<File>(header.path, O_RDONLY, 0644, decisions[f].mode);
      if (!file->direct_io()) {
        opened[f] = std::move(file);  // buffered: its worker reads it through File::read
        continue;
      }
      for (const Target *t : work[f]) {
        streams[t->segment->device].push_back({file.get(), &header, t});
      }
      streamed_files.push_back(std::move(file));
      streamed[f] = 1;
      work[f].clear();
    }
  }
  std::vector<detail::GatherMover *> movers;
  movers.reserve(streams.size());
  for (const auto &entry : streams) {
    movers.push_back(&stream(entry.first));
  }
  // A stream that failed may hold reads still in flight: it is made anew.
  std::vector<char> stream_failed(streams.size(), 0);
  shared.files_direct += streamed_files.size();
  const auto files_left = static_cast<std::size_t>(std::count_if(
      work.begin(), work.end(), [](const std::vector<const Target *> &w) { return !w.empty(); }));
  std::atomic<std::size_t> next{0};
  const std::size_t workers = std::min<std::size_t>(options_.parallel_files, files_left);
  const std::size_t threads_total = workers + streams.size();
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
  const auto streamer = [&](std::size_t index, const std::vector<Streamed> *segments) {
    try {
      read_streamed(*movers[index], *segments, options_, shared);
    } catch (...) {
      stream_failed[index] = 1;
      record_failure();
    }
    finish();
  };
  const auto worker = [&] {
    for (std::size_t f = next++; f < work.size() && !shared.stop; f = next++) {
      if (work[f].empty()) {
        continue;
      }
      try {
        read_file(ckpt.files[f], work[f], caps_of(f), std::move(opened[f]), options_, shared,
                  decisions[f]);
      } catch (...) {
        record_failure();
      }
    }
    finish();
  };
  std::vector<std::jthread> threads;
  threads.reserve(threads_total);
  std::size_t m = 0;
  for (const auto &entry : streams) {
    threads.emplace_back(streamer, m++, &entry.second);
  }
  for (std::size_t i = 0; i < workers; ++i) {
    threads.emplace_back(worker);
  }
  std::uint64_t total = 0;  // what the reads will count: the aligned ends stop at EOF
  for (const Segment &s : plan.segments) {
    total += available(s, ckpt.files[s.file]);
  }
  for (;;) {
    std::unique_lock lock(shared.mutex);
    const bool all = shared.finished_cv.wait_for(lock, std::chrono::milliseconds(100),
                                                 [&] { return shared.finished == threads_total; });
    lock.unlock();
    if (options_.progress) {
      options_.progress(shared.done.load(), total);
    }
    if (all) {
      break;
    }
  }
  threads.clear();
  std::size_t k = 0;
  for (const auto &entry : streams) {
    if (stream_failed[k++] != 0) {
      streams_.erase(entry.first);
    }
  }
  if (shared.error) {
    std::rethrow_exception(shared.error);
  }

  LoadStats &stats = result->stats;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.allocate_seconds = std::chrono::duration<double>(allocated - start).count();
  stats.bytes_read = shared.done.load();
  stats.tensor_bytes = ckpt.tensor_bytes();
  stats.files = ckpt.files.size();
  stats.files_direct = shared.files_direct.load();
  stats.files_streamed = streamed_files.size();
  stats.segments = plan.segments.size();
  for (auto &[id, dev] : devices_) {
    stats.engines.emplace(id, dev.engine());
  }
  for (std::size_t f = 0; f < per_file.size(); ++f) {
    FileReadStats &fs = per_file[f];
    const ReadDecision &d = decisions[f];
    fs.direct = d.mode != DirectIo::off;
    fs.resident = d.resident;
    fs.why = d.why;
    if (streamed[f] != 0) {
      fs.path_taken = "stream";
      fs.threads = 1;
      fs.request_bytes = stream_request(options_);
      fs.depth = stream_depth(options_);
      continue;
    }
    const Target *first = nullptr;
    for (const Target &t : targets) {
      if (t.segment->file == f) {
        first = &t;
        break;
      }
    }
    if (first == nullptr) {
      fs.direct = false;
      fs.why = "not read: none of its tensors were asked for";
      continue;
    }
    const Device &dev = device(first->segment->device);
    if (first->registration.host_view() != nullptr) {
      fs.path_taken = "queue";
      fs.threads = 1;
      fs.request_bytes = options_.chunk_size;
      fs.depth = options_.queue_depth;
    } else {
      const Options &o = dev.options();
      const bool copy_threads = dev.engine() == Engine::compat;
      fs.path_taken = "engine";
      fs.threads = copy_threads ? o.copy_threads : 1;
      fs.request_bytes = fs.direct ? o.copy_direct_chunk : o.copy_chunk;
      fs.depth = copy_threads ? std::size_t{o.copy_threads} * o.copy_depth : 1;
    }
  }
  stats.per_file = std::move(per_file);
  result->tensors.reserve(ckpt.tensor_count());
  for (const Target &t : targets) {
    const FileHeader &file = ckpt.files[t.segment->file];
    for (const std::size_t index : t.segment->tensors) {
      const TensorInfo &info = file.tensors[index];
      LoadedTensor lt;
      lt.info = &info;
      lt.device = t.segment->device;
      lt.cuda_ordinal = t.ordinal;
      lt.memory = t.memory;
      lt.data = t.base + (file.data_offset() + info.begin - t.segment->file_begin);
      lt.owner = t.owner;
      result->tensors.push_back(std::move(lt));
    }
  }
  // Registrations end here; the memory stays with the tensors.
  return result;
}

std::shared_ptr<LoadedCheckpoint> load(Checkpoint checkpoint, const LoadOptions &options) {
  Loader loader(options);
  return loader.load(std::move(checkpoint));
}

}  // namespace phx::safetensors
