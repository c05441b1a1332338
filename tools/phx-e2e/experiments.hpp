// SPDX-License-Identifier: MIT
// The paper's Fig 8 measurements on one Loader.  Both throw what the
// loader throws (std::system_error from libphoenix, naming file and offset).
#ifndef PHX_E2E_EXPERIMENTS_HPP
#define PHX_E2E_EXPERIMENTS_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "e2e_config.hpp"
#include "loader.hpp"
#include "verification.hpp"

namespace phx_e2e {

/// Fig 8a, one request size: a request that registers its buffer, reads
/// and deregisters, against the same read on a buffer registered before.
struct RequestResult {
  std::uint64_t size = 0;
  bool registers = false;           ///< false (posix): register/deregister are empty
  std::vector<double> register_us;  ///< per registered request
  std::vector<double> read_us;      ///< per registered request: its read
  std::vector<double> deregister_us;
  std::vector<double> total_us;      ///< register + read + deregister
  std::vector<double> pure_read_us;  ///< reads on the pre-registered buffer
  Verification verify{false};
};

/// Fig 8b, one file size: every step of loading the whole file, --loops times.
struct LoadResult {
  std::uint64_t file_size = 0;
  struct Step {
    std::string name;
    std::vector<double> us;  ///< empty: the engine has no such step
  };
  std::vector<Step> steps;  ///< in the order they run
  std::vector<double> total_us;
  Verification verify{false};
};

/// The Fig 8a file is the pattern over @p file_length bytes.
[[nodiscard]] std::vector<RequestResult> measure_requests(const Config &config, Loader &loader,
                                                          const std::string &path,
                                                          std::uint64_t file_length);

/// The Fig 8b file is the pattern over @p file_size bytes.
[[nodiscard]] LoadResult measure_load(const Config &config, Loader &loader, const std::string &path,
                                      std::uint64_t file_size);

}  // namespace phx_e2e

#endif  // PHX_E2E_EXPERIMENTS_HPP
