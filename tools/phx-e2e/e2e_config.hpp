// SPDX-License-Identifier: MIT
// phx-e2e's configuration, as checked from the command line.
#ifndef PHX_E2E_CONFIG_HPP
#define PHX_E2E_CONFIG_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace phx_e2e {

struct Config {
  std::vector<std::string> engines;  ///< empty: every engine that runs here
  int device = 0;
  bool fig8a = true;
  bool fig8b = true;
  std::vector<std::uint64_t> sizes;               ///< Fig 8a request sizes
  std::vector<std::uint64_t> file_sizes;          ///< Fig 8b file sizes
  unsigned repeat = 100;                          ///< Fig 8a samples per size and kind
  unsigned warmup = 3;                            ///< Fig 8a unmeasured requests first
  unsigned loops = 10;                            ///< Fig 8b runs per file size
  std::uint64_t chunk = std::uint64_t{16} << 20;  ///< Fig 8b bytes per read
  unsigned threads = 4;                           ///< Fig 8b reader threads
  std::optional<std::uint64_t> device_addr;       ///< phoenix: device addresses from here
  std::string dir = "/var/tmp";                   ///< where the data files go
  bool reuse_files = false;
  bool quick = false;
  bool verify = false;
  bool json = false;
  bool quiet = false;
};

}  // namespace phx_e2e

#endif  // PHX_E2E_CONFIG_HPP
