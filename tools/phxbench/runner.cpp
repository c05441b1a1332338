// SPDX-License-Identifier: MIT
#include "runner.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "common/gpu.hpp"
#include "common/pattern.hpp"

namespace phxbench {
namespace {

namespace gpu = phxtools::gpu;
using phxtools::fill_pattern;
using phxtools::find_mismatch;

using Clock = std::chrono::steady_clock;

std::uint64_t elapsed_ns(Clock::time_point from, Clock::time_point to) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double seconds_of(const timeval &tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

// Splits n items over parts: part i gets [first(i), first(i + 1)).
// floor(n * i / parts) without overflow: n = q * parts + r.
std::uint64_t share_start(std::uint64_t n, unsigned parts, unsigned i) {
  return n / parts * i + n % parts * i / parts;
}

// The file offsets one thread visits: its own slice in order (seq), or any
// block of the whole range (rand).  Offsets are multiples of the I/O size.
class OffsetSource {
 public:
  OffsetSource(Pattern pattern, std::uint64_t io_size, std::uint64_t first_block,
               std::uint64_t slice_blocks, std::uint64_t total_blocks, std::uint64_t seed)
      : pattern_(pattern),
        io_size_(io_size),
        first_(first_block),
        slice_(slice_blocks),
        total_(total_blocks),
        seed_(seed),
        state_(seed) {}

  std::uint64_t next() noexcept {
    std::uint64_t block = 0;
    if (pattern_ == Pattern::seq) {
      block = first_ + cursor_++ % slice_;
    } else {
      block = splitmix64() % total_;
    }
    return block * io_size_;
  }

  void reset() noexcept {
    cursor_ = 0;
    state_ = seed_;
  }

 private:
  std::uint64_t splitmix64() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  Pattern pattern_;
  std::uint64_t io_size_;
  std::uint64_t first_;
  std::uint64_t slice_;
  std::uint64_t total_;
  std::uint64_t seed_;
  std::uint64_t state_;
  std::uint64_t cursor_ = 0;
};

// When a phase ends: after a number of requests, at a time, or when another
// thread failed.
struct Budget {
  std::optional<std::uint64_t> ops;
  std::optional<Clock::time_point> deadline;
  const std::atomic<bool> *stop = nullptr;

  [[nodiscard]] std::uint64_t next_batch(std::uint64_t issued, unsigned depth) const {
    if (stop->load(std::memory_order_relaxed)) {
      return 0;
    }
    if (deadline && Clock::now() >= *deadline) {
      return 0;
    }
    if (ops) {
      return std::min<std::uint64_t>(depth, *ops - std::min(*ops, issued));
    }
    return depth;
  }
};

struct Shared {
  const Options &options;
  std::size_t io_size;
  std::atomic<bool> stop{false};
  // Blocks written (write runs with --verify), read back after the run.
  std::vector<std::atomic<std::uint8_t>> written;
};

struct Worker {
  Shared *shared = nullptr;
  std::unique_ptr<ThreadIo> io;
  std::unique_ptr<gpu::Stream> stream;
  std::unique_ptr<OffsetSource> source;
  Histogram latency;
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
  std::uint64_t warmup_bytes = 0;
  std::uint64_t enqueue_ns = 0;  // stream mode: time in the enqueue calls, measured phase
  VerifyResult verify;
  std::vector<std::byte> scratch;
  Clock::time_point end;
  std::exception_ptr error;
  bool recording = false;

  // Write data for a request: the file's pattern at its offset (--verify).
  void prepare(unsigned slot, std::uint64_t offset) {
    const Options &o = shared->options;
    if (o.io == IoDir::write && o.verify) {
      fill_pattern(scratch, offset);
      io->load(slot, scratch);
    }
  }

  // Accounting and checks for a request that moved @p done bytes.
  void finish(unsigned slot, std::uint64_t offset, std::size_t done) {
    const Options &o = shared->options;
    if (done != shared->io_size) {
      throw std::runtime_error(std::string(o.io == IoDir::read ? "short read" : "short write") +
                               " at offset " + std::to_string(offset) + ": " +
                               std::to_string(done) + " of " + std::to_string(shared->io_size) +
                               " bytes (is the file shorter than --length?)");
    }
    if (recording) {
      bytes += done;
      ++ops;
    } else {
      warmup_bytes += done;
    }
    if (!o.verify) {
      return;
    }
    if (o.io == IoDir::write) {
      shared->written[offset / shared->io_size].store(1, std::memory_order_relaxed);
      return;
    }
    io->store(slot, scratch);
    verify.bytes_checked += done;
    if (const auto bad = find_mismatch(scratch, offset)) {
      verify.ok = false;
      ++verify.mismatched_ios;
      if (!verify.first_mismatch_offset || *bad < *verify.first_mismatch_offset) {
        verify.first_mismatch_offset = bad;
      }
    }
  }

  void completed(const phx::IoCompletion &c, std::uint64_t offset) {
    if (c.error != 0) {
      throw std::system_error(
          c.error, std::system_category(),
          std::string(to_string(shared->options.io)) + " at offset " + std::to_string(offset));
    }
    const auto slot = static_cast<unsigned>(c.user_data);
    if (shared->options.io == IoDir::read) {
      io->after_read(slot, c.bytes);
    }
    finish(slot, offset, c.bytes);
  }

  void record(Clock::time_point from, Clock::time_point to) {
    if (recording) {
      latency.record(elapsed_ns(from, to));
    }
  }

  void run_sync(const Budget &budget) {
    const IoDir dir = shared->options.io;
    for (std::uint64_t issued = 0; budget.next_batch(issued, 1) > 0; ++issued) {
      const std::uint64_t offset = source->next();
      prepare(0, offset);
      const Clock::time_point t0 = Clock::now();
      const std::size_t done = io->transfer(dir, 0, shared->io_size, offset);
      record(t0, Clock::now());
      finish(0, offset, done);
    }
  }

  // io_uring with `depth` requests in flight: each completion is replaced at once.
  void run_async(const Budget &budget) {
    const IoDir dir = shared->options.io;
    const unsigned depth = shared->options.depth;
    phx::IoQueue queue(depth);
    std::vector<std::uint64_t> offsets(depth);
    std::vector<Clock::time_point> started(depth);
    std::vector<phx::IoRequest> pending;
    pending.reserve(depth);
    std::uint64_t issued = 0;
    auto issue = [&](unsigned slot) {
      offsets[slot] = source->next();
      prepare(slot, offsets[slot]);
      if (dir == IoDir::write) {
        io->before_write(slot, shared->io_size);
      }
      pending.push_back(io->request(dir, slot, shared->io_size, offsets[slot], slot));
      ++issued;
    };
    auto submit = [&] {
      const Clock::time_point now = Clock::now();
      for (const phx::IoRequest &r : pending) {
        started[r.user_data] = now;
      }
      queue.submit(pending);
      pending.clear();
    };
    for (unsigned slot = 0; slot < depth && budget.next_batch(issued, 1) > 0; ++slot) {
      issue(slot);
    }
    submit();
    while (queue.outstanding() > 0) {
      for (const phx::IoCompletion &c : queue.wait(1)) {
        const auto slot = static_cast<unsigned>(c.user_data);
        record(started[slot], Clock::now());
        completed(c, offsets[slot]);
        if (budget.next_batch(issued, 1) > 0) {
          issue(slot);
        }
      }
      submit();
    }
  }

  // Up to `depth` requests submitted together and all reaped before the
  // next batch (cuFile's batch API shape); latency is per batch.
  void run_batch(const Budget &budget) {
    const IoDir dir = shared->options.io;
    const unsigned depth = shared->options.depth;
    phx::IoQueue queue(depth);
    std::vector<std::uint64_t> offsets(depth);
    std::vector<phx::IoRequest> requests;
    requests.reserve(depth);
    std::uint64_t issued = 0;
    for (std::uint64_t n = budget.next_batch(issued, depth); n > 0;
         n = budget.next_batch(issued, depth)) {
      requests.clear();
      for (unsigned slot = 0; slot < n; ++slot) {
        offsets[slot] = source->next();
        prepare(slot, offsets[slot]);
        if (dir == IoDir::write) {
          io->before_write(slot, shared->io_size);
        }
        requests.push_back(io->request(dir, slot, shared->io_size, offsets[slot], slot));
      }
      issued += n;
      const Clock::time_point t0 = Clock::now();
      const std::vector<phx::IoCompletion> done = queue.run(requests);
      record(t0, Clock::now());
      for (const phx::IoCompletion &c : done) {
        completed(c, offsets[c.user_data]);
      }
    }
  }

  // Up to `depth` stream-ordered requests enqueued on the thread's CUDA
  // stream, then the stream synchronised; latency is per batch.
  void run_stream(const Budget &budget) {
    const IoDir dir = shared->options.io;
    const unsigned depth = shared->options.depth;
    std::vector<std::uint64_t> offsets(depth);
    std::vector<ssize_t> done(depth);
    std::uint64_t issued = 0;
    for (std::uint64_t n = budget.next_batch(issued, depth); n > 0;
         n = budget.next_batch(issued, depth)) {
      for (unsigned slot = 0; slot < n; ++slot) {
        offsets[slot] = source->next();
        prepare(slot, offsets[slot]);
        done[slot] = 0;
      }
      issued += n;
      const Clock::time_point t0 = Clock::now();
      try {
        for (unsigned slot = 0; slot < n; ++slot) {
          io->enqueue(dir, slot, shared->io_size, offsets[slot], &done[slot], stream->get());
        }
        if (recording) {
          enqueue_ns += elapsed_ns(t0, Clock::now());
        }
      } catch (...) {
        // Requests already enqueued write into done[] when they finish.
        try {
          stream->synchronize();
        } catch (...) {
          // The enqueue error is the one to report.
        }
        throw;
      }
      stream->synchronize();
      record(t0, Clock::now());
      for (unsigned slot = 0; slot < n; ++slot) {
        if (done[slot] < 0) {
          throw std::system_error(
              static_cast<int>(-done[slot]), std::system_category(),
              std::string(to_string(dir)) + " at offset " + std::to_string(offsets[slot]));
        }
        finish(slot, offsets[slot], static_cast<std::size_t>(done[slot]));
      }
    }
  }

  void run_phase(const Budget &budget) {
    switch (shared->options.mode) {
      case Mode::sync:
        run_sync(budget);
        break;
      case Mode::async:
        run_async(budget);
        break;
      case Mode::batch:
        run_batch(budget);
        break;
      case Mode::stream:
        run_stream(budget);
        break;
    }
  }
};

// Reads back every block a write run wrote, through the page cache (which
// O_DIRECT writes keep coherent), and checks it against the pattern.
void verify_written(const Shared &shared, const phx::File &file, VerifyResult &verify) {
  const phxtools::UniqueFd fd = phxtools::open_fd(file.path().string(), O_RDONLY);
  std::vector<std::byte> buf(shared.io_size);
  for (std::size_t block = 0; block < shared.written.size(); ++block) {
    if (shared.written[block].load(std::memory_order_relaxed) == 0) {
      continue;
    }
    const std::uint64_t offset = block * shared.io_size;
    std::size_t got = 0;
    while (got < buf.size()) {
      const ssize_t n =
          ::pread(fd.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      got += static_cast<std::size_t>(n);
    }
    verify.bytes_checked += got;
    std::optional<std::uint64_t> bad = find_mismatch(std::span(buf).first(got), offset);
    if (!bad && got < buf.size()) {
      bad = offset + got;  // the file ends before the bytes written
    }
    if (bad) {
      verify.ok = false;
      ++verify.mismatched_ios;
      if (!verify.first_mismatch_offset || *bad < *verify.first_mismatch_offset) {
        verify.first_mismatch_offset = bad;
      }
    }
  }
}

}  // namespace

RunResult run_benchmark(const Options &options, Engine &engine, phx::File &file,
                        std::uint64_t length) {
  const std::uint64_t io_size = options.io_size;
  const std::uint64_t blocks = length / io_size;
  const unsigned threads = options.threads;
  if (blocks == 0) {
    throw std::invalid_argument("--length " + std::to_string(length) +
                                " is smaller than one I/O (--io-size " + std::to_string(io_size) +
                                ")");
  }
  if (options.pattern == Pattern::seq && blocks < threads) {
    throw std::invalid_argument(
        "sequential I/O splits the file among threads: " + std::to_string(blocks) + " I/Os of " +
        std::to_string(io_size) + " bytes cannot feed " + std::to_string(threads) + " threads");
  }

  Shared shared{options, static_cast<std::size_t>(io_size), {}, {}};
  if (options.verify && options.io == IoDir::write) {
    shared.written = std::vector<std::atomic<std::uint8_t>>(blocks);
  }
  const unsigned slots = options.mode == Mode::sync ? 1 : options.depth;

  // Measured ops: one pass over the file unless --total or --duration says otherwise.
  std::optional<std::uint64_t> total_ops;
  if (options.total_bytes) {
    total_ops = (*options.total_bytes + io_size - 1) / io_size;
  } else if (!options.duration_s) {
    total_ops = blocks;
  }
  std::optional<std::uint64_t> warmup_ops;
  if (options.warmup_bytes) {
    warmup_ops = (*options.warmup_bytes + io_size - 1) / io_size;
  }

  // Buffers, registrations and streams are set up before any thread starts,
  // so a failure there stops the run before it begins.
  std::vector<Worker> workers(threads);
  for (unsigned t = 0; t < threads; ++t) {
    Worker &w = workers[t];
    w.shared = &shared;
    w.io = engine.open_thread(file, shared.io_size, slots);
    w.io->check_mode(options.mode);
    if (options.mode == Mode::stream) {
      w.stream = std::make_unique<gpu::Stream>(engine.cuda_device());
    }
    const std::uint64_t first = share_start(blocks, threads, t);
    w.source = std::make_unique<OffsetSource>(options.pattern, io_size, first,
                                              share_start(blocks, threads, t + 1) - first, blocks,
                                              options.seed * 0x100000001b3ULL + t);
    w.scratch.resize(shared.io_size);
  }

  Clock::time_point start;
  rusage usage_start{};
  auto on_start = [&]() noexcept {
    (void)::getrusage(RUSAGE_SELF, &usage_start);
    start = Clock::now();
  };
  std::barrier sync_point(static_cast<std::ptrdiff_t>(threads), on_start);
  const Clock::time_point warmup_start = Clock::now();

  auto body = [&](unsigned t) {
    Worker &w = workers[t];
    const bool warm = options.warmup_s.has_value() || warmup_ops.has_value();
    try {
      if (warm) {
        Budget budget{std::nullopt, std::nullopt, &shared.stop};
        if (warmup_ops) {
          budget.ops =
              share_start(*warmup_ops, threads, t + 1) - share_start(*warmup_ops, threads, t);
        }
        if (options.warmup_s) {
          budget.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(*options.warmup_s));
        }
        w.run_phase(budget);
        w.source->reset();
      }
    } catch (...) {
      w.error = std::current_exception();
      shared.stop = true;
      sync_point.arrive_and_drop();
      return;
    }
    sync_point.arrive_and_wait();
    try {
      w.recording = true;
      Budget budget{std::nullopt, std::nullopt, &shared.stop};
      if (total_ops) {
        budget.ops = share_start(*total_ops, threads, t + 1) - share_start(*total_ops, threads, t);
      }
      if (options.duration_s) {
        budget.deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(*options.duration_s));
      }
      w.run_phase(budget);
    } catch (...) {
      w.error = std::current_exception();
      shared.stop = true;
    }
    w.end = Clock::now();
  };

  std::vector<std::jthread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back(body, t);
  }
  pool.clear();  // joins
  rusage usage_end{};
  (void)::getrusage(RUSAGE_SELF, &usage_end);

  for (const Worker &w : workers) {
    if (w.error) {
      std::rethrow_exception(w.error);
    }
  }

  RunResult result;
  result.latency_of = options.mode == Mode::async || options.mode == Mode::sync ? "io" : "batch";
  Clock::time_point end = start;
  for (const Worker &w : workers) {
    result.bytes += w.bytes;
    result.ops += w.ops;
    result.warmup_bytes += w.warmup_bytes;
    result.enqueue_seconds += static_cast<double>(w.enqueue_ns) / 1e9;
    result.latency.merge(w.latency);
    end = std::max(end, w.end);
    result.verify.bytes_checked += w.verify.bytes_checked;
    result.verify.mismatched_ios += w.verify.mismatched_ios;
    result.verify.ok = result.verify.ok && w.verify.ok;
    if (w.verify.first_mismatch_offset &&
        (!result.verify.first_mismatch_offset ||
         *w.verify.first_mismatch_offset < *result.verify.first_mismatch_offset)) {
      result.verify.first_mismatch_offset = w.verify.first_mismatch_offset;
    }
  }
  result.seconds = seconds_between(start, end);
  result.warmup_seconds = seconds_between(warmup_start, start);
  result.cpu_user_s = seconds_of(usage_end.ru_utime) - seconds_of(usage_start.ru_utime);
  result.cpu_sys_s = seconds_of(usage_end.ru_stime) - seconds_of(usage_start.ru_stime);
  result.verify.ran = options.verify;
  if (options.verify && options.io == IoDir::write) {
    verify_written(shared, file, result.verify);
  }
  return result;
}

}  // namespace phxbench
