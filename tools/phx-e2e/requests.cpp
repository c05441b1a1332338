// SPDX-License-Identifier: MIT
// Fig 8a: what registering per request costs a small read.  Each size runs
// the pre-registered reads first, then the requests that register their
// own buffer; reads walk the file in request-size steps, the two kinds
// half a file apart.  Verification happens between the timed steps.
#include <algorithm>
#include <stdexcept>

#include "common/timing.hpp"
#include "experiments.hpp"

namespace phx_e2e {
namespace {

using phxtools::Clock;
using phxtools::us_since;

void read_exactly(Loader &loader, std::size_t size, std::uint64_t offset) {
  if (loader.read(0, 0, size, offset) != size) {
    throw std::runtime_error("short read of " + std::to_string(size) + " bytes at offset " +
                             std::to_string(offset) + " (the data file is shorter than expected)");
  }
}

}  // namespace

std::vector<RequestResult> measure_requests(const Config &config, Loader &loader,
                                            const std::string &path, std::uint64_t file_length) {
  const std::uint64_t largest = *std::max_element(config.sizes.begin(), config.sizes.end());
  (void)loader.open_driver();
  loader.open_file(path);
  loader.allocate(largest, 1, largest);
  std::vector<RequestResult> results;
  for (const std::uint64_t size : config.sizes) {
    RequestResult r;
    r.size = size;
    r.verify = Verification(config.verify);
    const std::uint64_t slots = file_length / size;
    const auto offset = [&](unsigned i, std::uint64_t shift) { return (i + shift) % slots * size; };

    r.registers = loader.register_buffer(0, size);
    for (unsigned i = 0; i < config.warmup + config.repeat; ++i) {
      const Clock::time_point t0 = Clock::now();
      read_exactly(loader, size, offset(i, 0));
      const double us = us_since(t0);
      if (i >= config.warmup) {
        r.pure_read_us.push_back(us);
      }
      r.verify.check(loader, 0, size, offset(i, 0));
    }
    (void)loader.deregister_buffer();

    for (unsigned i = 0; i < config.warmup + config.repeat; ++i) {
      Clock::time_point t0 = Clock::now();
      (void)loader.register_buffer(0, size);
      const double reg = us_since(t0);
      t0 = Clock::now();
      read_exactly(loader, size, offset(i, slots / 2));
      const double read = us_since(t0);
      r.verify.check(loader, 0, size, offset(i, slots / 2));
      t0 = Clock::now();
      (void)loader.deregister_buffer();
      const double dereg = us_since(t0);
      if (i >= config.warmup) {
        r.register_us.push_back(reg);
        r.read_us.push_back(read);
        r.deregister_us.push_back(dereg);
        r.total_us.push_back(r.registers ? reg + read + dereg : read);
      }
    }
    results.push_back(std::move(r));
  }
  loader.free_buffer();
  loader.close_file();
  (void)loader.close_driver();
  return results;
}

}  // namespace phx_e2e
