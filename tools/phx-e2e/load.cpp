// SPDX-License-Identifier: MIT
// Fig 8b: loading a whole file into device memory as a model loader does,
// with every setup and teardown step timed: driver, file, buffer
// allocation and registration, the read (--threads threads taking
// --chunk pieces in turn), and the way back.
#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/timing.hpp"
#include "experiments.hpp"

namespace phx_e2e {
namespace {

using phxtools::Clock;
using phxtools::us_since;

void read_whole_file(const Config &config, Loader &loader, std::uint64_t file_size) {
  const std::uint64_t pieces = (file_size + config.chunk - 1) / config.chunk;
  const auto threads = static_cast<unsigned>(std::min<std::uint64_t>(config.threads, pieces));
  std::atomic<std::uint64_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;
  const auto reader = [&](unsigned thread) {
    try {
      for (std::uint64_t i = next++; i < pieces; i = next++) {
        const std::uint64_t offset = i * config.chunk;
        const std::size_t size = std::min<std::uint64_t>(config.chunk, file_size - offset);
        if (loader.read(thread, offset, size, offset) != size) {
          throw std::runtime_error("short read at offset " + std::to_string(offset) +
                                   " (the data file is shorter than expected)");
        }
      }
    } catch (...) {
      next = pieces;  // the other threads stop at their next piece
      const std::lock_guard lock(failed_mutex);
      if (!failed) {
        failed = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 1; t < threads; ++t) {
      pool.emplace_back(reader, t);
    }
    reader(0);
  }
  if (failed) {
    std::rethrow_exception(failed);
  }
}

}  // namespace

LoadResult measure_load(const Config &config, Loader &loader, const std::string &path,
                        std::uint64_t file_size) {
  LoadResult r;
  r.file_size = file_size;
  r.verify = Verification(config.verify);
  const std::size_t piece = std::min<std::uint64_t>(config.chunk, file_size);
  // Each step returns whether the engine has it; read is timed as one step.
  const std::vector<std::pair<const char *, std::function<bool()>>> steps = {
      {"driver_open", [&] { return loader.open_driver(); }},
      {"file_open",
       [&] {
         loader.open_file(path);
         return true;
       }},
      {"buffer_alloc",
       [&] {
         loader.allocate(file_size, config.threads, piece);
         return true;
       }},
      {"buffer_register", [&] { return loader.register_buffer(0, file_size); }},
      {"read",
       [&] {
         read_whole_file(config, loader, file_size);
         return true;
       }},
      {"buffer_deregister", [&] { return loader.deregister_buffer(); }},
      {"buffer_free",
       [&] {
         loader.free_buffer();
         return true;
       }},
      {"file_close",
       [&] {
         loader.close_file();
         return true;
       }},
      {"driver_close", [&] { return loader.close_driver(); }},
  };
  for (const auto &[name, step] : steps) {
    r.steps.push_back({name, {}});
  }
  for (unsigned loop = 0; loop < config.loops; ++loop) {
    double total = 0;
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const Clock::time_point t0 = Clock::now();
      const bool has_step = steps[s].second();
      const double us = us_since(t0);
      if (has_step) {
        r.steps[s].us.push_back(us);
        total += us;
      }
      if (r.steps[s].name == "read") {
        r.verify.check(loader, 0, file_size, 0);
      }
    }
    r.total_us.push_back(total);
  }
  return r;
}

}  // namespace phx_e2e
